"""The soak benchmark, CI-sized (issue #30): a real `geode serve` with the Telegram and
model fakes in their own processes, 300 turns across 20 threads. Not a timing test: it
asserts that nothing was lost or duplicated, that serve logged one ``turn.done`` line per
turn, and that serve's open file descriptors do not grow after warm-up (a leak of one
connection, file or socket per turn or per thread would show here within 300 turns)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_soak.py"

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
def test_soak_loses_nothing_and_leaks_no_fds(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--turns", "300", "--threads", "20", "--chats", "4",
         "--samples", "6", "--json-out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=280, check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    audit, samples = report["audit"], report["samples"]
    assert report["params"]["turns"] == 300 and report["params"]["threads"] == 20
    assert audit["asked"] == audit["answered"] == 300, audit
    assert audit["n_lost"] == audit["segment_lost"] == 0, audit
    assert audit["n_duplicated"] == 0 and audit["unasked"] == 0, audit
    assert audit["turn_done_lines"] == 300, audit  # serve's default INFO line, one a turn
    assert audit["errors_in_log"] == 0, audit
    # resources: every thread has run (warm-up: first quarter); afterwards no fd that is
    # not a socket is opened for good, and the socket peak (keep-alive pools to the fakes
    # come and go with the load) does not climb from the first half to the second
    assert len(samples) == 7
    warm = [s for s in samples if s["turns"] >= 0.25 * 300]
    files = [s["fds"] - s["sockets"] for s in warm]
    assert max(files) - files[0] <= 2, samples
    half = len(warm) // 2
    assert (max(s["fds"] for s in warm[half:])
            <= max(s["fds"] for s in warm[:half]) + 5), samples
    assert report["analysis"]["file_fd_growth"] <= 2
    assert "turns across 20 threads" in proc.stdout and "fds" in proc.stdout
