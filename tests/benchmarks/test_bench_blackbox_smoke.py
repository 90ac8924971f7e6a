"""The black-box benchmark still runs end to end with tiny parameters (its numbers are not
checked: benchmarks are measured, never asserted): every side answers every message of
every load, and the table has a row for each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_blackbox.py"

pytestmark = pytest.mark.slow


def test_every_side_answers_every_load() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--chats", "2", "--seq", "2", "--per-chat", "2",
         "--interval", "0.5", "--duration", "1"],
        capture_output=True, text=True, timeout=240, check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()
            if line.split()[:1] and line.split()[0] in ("floor", "geode-paced", "geode-unpaced")
            and "CPU" not in line]
    loads = [(r[0], " ".join(r[1:3]) if r[1] != "seq" else "seq") for r in rows]
    assert loads == [(side, load) for side in ("floor", "geode-paced", "geode-unpaced")
                     for load in ("seq", "light 2", "closed 2")]
    for r in rows:
        load_words = 1 if r[1] == "seq" else 2
        sent, lost = int(r[1 + load_words]), int(r[2 + load_words])
        assert sent > 0 and lost == 0, r
        calls_per_reply = float(r[7 + load_words])
        assert calls_per_reply >= 1.0, r  # the answer itself is at least one Bot API call


def test_burst_answers_every_thread() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--burst", "10", "--burst-latency", "0.05",
         "--burst-only"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "answered 10 / 10" in proc.stdout
    assert "peak RSS" in proc.stdout
