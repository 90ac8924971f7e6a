"""The channel benchmark still runs end to end (its numbers are not checked: benchmarks are
measured, never asserted). One small table row and one small load run, on Telegram."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_channels.py"


def _run(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--platforms", "telegram", *args],
        capture_output=True, text=True, timeout=100, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_table_has_a_row_for_each_level() -> None:
    out = _run("--threads", "1", "2", "--rounds", "1")
    table, _, calls = out.partition("the same platform calls without GEODE")
    rows = [line.split() for line in table.splitlines() if line.startswith("telegram ")]
    assert [r[1] for r in rows] == ["1", "2"]
    assert all(r[2] == "|" and float(r[3]) > 0 for r in rows)  # floor p50 measured
    assert "targets at 50 threads" not in out  # no 50-thread level was run
    # The reference bot making GEODE's platform calls alone ran at each level too.
    rows = [line.split() for line in calls.splitlines() if line.startswith("telegram ")]
    assert [r[1] for r in rows] == ["1", "2"]
    assert all(r[2] == "|" and float(r[3]) > 0 for r in rows)


def test_load_run_answers_every_thread() -> None:
    out = _run("--load", "20", "--model-latency", "0.05", "--load-only")
    assert "answered: 20 / 20" in out
    assert "peak RSS" in out
    assert "target (all answered, peak RSS <= 300 MB): met" in out
