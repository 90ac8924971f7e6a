"""The soak benchmark, CI-sized (issue #30): a real `geode serve` with the Telegram and
model fakes in their own processes, 300 turns across 20 threads. Not a timing test: it
asserts that nothing was lost or duplicated, that serve logged one ``turn.done`` line per
turn, and that serve's open file descriptors do not grow after warm-up (a leak of one
connection, file or socket per turn or per thread would show here within 300 turns)."""

from __future__ import annotations

import importlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPT = BENCH / "bench_soak.py"


@pytest.mark.slow
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
    # not a socket is opened for good. Sockets are the keep-alive pools to the fakes: each
    # pool keeps the most connections that were ever in flight at once, so its count is a
    # high-water mark of concurrency and may still rise by a few when the 20 threads'
    # requests happen to line up later (CI saw 54 -> 60). A leak of a socket a turn adds
    # one for each of the second half's ~150 turns; one a thread and round, 20 per round.
    # So the peak may climb by less than a connection per thread, never by one per turn.
    assert len(samples) == 7
    warm = [s for s in samples if s["turns"] >= 0.25 * 300]
    files = [s["fds"] - s["sockets"] for s in warm]
    assert max(files) - files[0] <= 2, samples
    half = len(warm) // 2
    assert (max(s["fds"] for s in warm[half:])
            < max(s["fds"] for s in warm[:half]) + 20), samples
    assert report["analysis"]["file_fd_growth"] <= 2
    assert "turns across 20 threads" in proc.stdout and "fds" in proc.stdout


def _bench(name: str) -> Any:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


def test_memory_probe_reads_every_allocator(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe ``--probe`` runs inside serve: Python's arenas and blocks, glibc's heap,
    SQLite's own allocator and the compiled cache of every engine built after it is
    installed (serve freezes its start-up objects, so they are recorded as built)."""
    probe = _bench("_profiled_serve")
    monkeypatch.setattr(Engine, "__init__", Engine.__init__)  # undone after the test
    monkeypatch.setattr(probe, "_ENGINES", [])
    probe._record_engines()
    engine = create_engine("sqlite://")
    with engine.connect() as conn:
        conn.execute(text("SELECT 1")).all()
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (x)")
    q = probe._probe()
    db.close()
    engine.dispose()
    assert q["compiled_cache"] == [1]
    assert 0 < q["pymalloc_used"] <= q["pymalloc_arenas"]
    assert q["heap_in_use"] > 0 and q["heap_free"] >= 0
    assert q["sqlite_used"] > 0  # the open connection's schema and cache
    assert 0 < q["rss"] and 0 < q["rss_collected"]
    assert q["gc_types"] and q["gc_objects"] >= sum(q["gc_types"].values())


def _probes(live: list[float], kept: list[float]) -> list[dict[str, Any]]:
    return [{"pymalloc_used": int(lv * 2**20), "pymalloc_arenas": int((lv + k) * 2**20),
             "heap_in_use": 0, "heap_free": 0, "sqlite_used": 0, "compiled_cache": [3]}
            for lv, k in zip(live, kept, strict=True)]


def test_memory_analysis_tells_live_growth_from_kept_memory() -> None:
    """A leak grows what is live after a collection; an allocator keeping memory after
    peaks grows only what it keeps: the soak's memory verdict is on the first."""
    soak = _bench("bench_soak")
    turns = range(0, 10_001, 1000)
    samples = [soak.Sample(turns=t, elapsed_s=0, turns_per_s=0, p50_ms=0, fds=0, sockets=0,
                           rss_mb=100 + t / 1000 * 3, threads=0, cpu_s=0, db_mb=0, wal_mb=0)
               for t in turns]
    flat = [60.0 + (0.4 if i % 2 else 0) for i in range(len(samples))]  # in-flight noise
    rising = [60.0 + 3 * i for i in range(len(samples))]
    kept = soak.analyse_probes(samples, _probes(flat, rising), warmup=0.25, slope_mb=2)
    assert kept["live_flat"] and kept["kept_growth_mb"] == pytest.approx(21, abs=0.1)
    assert abs(kept["live_growth_mb"]) <= 0.4
    leak = soak.analyse_probes(samples, _probes(rising, flat), warmup=0.25, slope_mb=2)
    assert not leak["live_flat"] and leak["live_growth_mb"] == pytest.approx(21, abs=0.1)
    assert leak["live_slope_last_quarter_mb_per_1000"] == pytest.approx(3, abs=0.01)
