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
         "--interval", "0.5", "--duration", "1", "--settle", "0.2"],
        capture_output=True, text=True, timeout=420, check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()
            if line.split()[:1] in (["telegram"], ["slack"], ["discord"]) and ":" not in line]
    sides = {"telegram": ("floor", "floor-visible", "geode-paced", "geode-unpaced"),
             "slack": ("floor", "floor-visible", "geode"),
             "discord": ("floor", "floor-visible", "geode")}
    loads = [(r[0], r[1], r[2] if r[2] == "seq" else f"{r[2]} {r[3]}") for r in rows]
    assert loads == [(platform, side, load) for platform in ("telegram", "slack", "discord")
                     for side in sides[platform] for load in ("seq", "light 2", "closed 2")]
    for r in rows:
        cols = r[3:] if r[2] == "seq" else r[4:]  # sent lost p50 p99 rep/s cpu calls ...
        sent, lost, calls_per_reply = int(cols[0]), int(cols[1]), float(cols[6])
        assert sent > 0 and lost == 0, r
        assert calls_per_reply >= 1.0, r  # the answer itself is at least one API call
        if r[1] == "floor-visible":  # 👀, (Discord: the thread,) "Working…", its edit
            assert calls_per_reply == (4.0 if r[0] == "discord" else 3.0), r


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


@pytest.mark.timeout(400)
def test_a_baseline_checkout_runs_beside_this_one() -> None:
    """``--baseline DIR``: GEODE from DIR runs beside this checkout's (alternating, with
    ``--rounds``), its rows marked ``@base``, the header names each checkout's commit, and
    the medians compare them (here DIR is this checkout itself)."""
    repo = SCRIPT.parents[1]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--platforms", "telegram", "--sides", "geode-unpaced",
         "--chats", "2", "--seq", "2", "--per-chat", "2", "--duration", "0", "--settle", "0.2",
         "--baseline", str(repo)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"geode: {repo} @ " in out and f"geode@base: {repo} @ " in out
    rows = [line.split() for line in out.splitlines() if line.startswith("telegram  ")]
    sides = [r[1] for r in rows if r[2] == "seq" and len(r) > 10]
    assert sides == ["geode-unpaced", "geode-unpaced@base"]
    assert "telegram geode-unpaced seq: CPU per reply" in out
    assert "telegram geode-unpaced closed 2: CPU per reply" in out


@pytest.mark.timeout(400)
def test_memory_on_runs_beside_memory_off() -> None:
    """``--memory N --memory-compare``: each GEODE side runs with memory off and with N
    entries in every prompt (rows marked ``+mem``), and the medians compare them."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--platforms", "telegram", "--sides", "geode-unpaced",
         "--chats", "2", "--seq", "2", "--per-chat", "2", "--duration", "0", "--settle", "0.2",
         "--memory", "12", "--memory-compare"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    rows = [line.split() for line in out.splitlines() if line.startswith("telegram  ")]
    assert [r[1] for r in rows if r[2] == "seq" and len(r) > 10] == [
        "geode-unpaced", "geode-unpaced+mem"]
    assert all(int(r[4]) == 0 for r in rows if r[2] == "seq" and len(r) > 10)  # none lost
    assert "telegram geode-unpaced+mem seq: CPU per reply" in out
    assert "x memory off's" in out


def test_the_streaming_load_times_first_words_and_complete_answers() -> None:
    """``--stream-tokens``: every side answers every message; the table gives the first
    visible words no later than the complete answer, and counts the platform's 429s."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--platforms", "telegram", "--sides", "floor",
         "geode-paced", "--chats", "2", "--stream-tokens", "8", "--tokens-per-s", "40",
         "--stream-seq", "1", "--settle", "0.2"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("telegram ")]
    assert [(r[1], f"{r[2]} {r[3]}") for r in rows] == [
        (side, load) for side in ("floor", "geode-paced") for load in ("stream 1", "stream 2")]
    for r in rows:  # replies lost first-p50 first-p99 done-p50 done-p99 calls 429s cpu
        replies, lost = int(r[4]), int(r[5])
        first_p50, done_p50 = float(r[6]), float(r[8])
        assert replies > 0 and lost == 0, r
        assert first_p50 <= done_p50, r
        assert r[11] == "0", r  # no 429 from the Telegram fake's flood control
