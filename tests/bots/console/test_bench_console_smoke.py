"""The console's benchmark still runs end to end (its numbers are not checked: benchmarks
are measured, never asserted): one round of nobody vs two viewers in one serve process, the
viewers' process signed in and receiving the thread's events."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_console.py"

pytestmark = pytest.mark.timeout(150)


def test_one_round_of_nobody_and_two_viewers() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "1", "--replies", "3", "--warm", "1",
         "--viewers-n", "2"],
        capture_output=True, text=True, timeout=140, check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = re.search(r"each viewer got >= (\d+) events per phase", proc.stdout)
    assert got is not None and int(got.group(1)) > 0, proc.stdout
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if line.strip().startswith(("nobody", "2 viewers", "difference"))}
    assert float(rows["nobody"][1]) > 0 and "difference" in rows, proc.stdout
