"""``geode serve`` under a profiler, for the benchmarks.

CPU (``bench_blackbox.py --profile``): yappi (CPU clock, every thread), profiling only
between SIGUSR1 (start) and SIGUSR2 (stop, then the stats are written), so start-up and
warm-up stay out of it. yappi slows Python-heavy code several times over: read the profile
for where the CPU goes, and the benchmark's unprofiled run for how much.

    python benchmarks/_profiled_serve.py OUT.pstat   (then: python -m pstats OUT.pstat)

Memory (``bench_soak.py --probe DIR`` / ``--memray DIR``):

    python benchmarks/_profiled_serve.py --probe OUT.jsonl [--memray OUT.bin]

``--probe``: on each SIGPWR one JSON line is appended to OUT.jsonl with what could hold
memory the soak sees as RSS: ``VmRSS``, glibc's heap (``mallinfo2``: bytes in use, free),
Python's small-object allocator (its arenas and the bytes of them in use),
SQLite's own allocator (``sqlite3_memory_used``: page caches, prepared statements, schema),
Python's live blocks (``sys.getallocatedblocks``) and objects tracked by the gc, and each
SQLAlchemy engine's compiled cache (entries). ``--memray``: SIGUSR1 starts memray with native
stacks (aggregated: only what is alive at the end and the high-water mark are kept),
SIGUSR2 stops it; ``python benchmarks/_profiled_serve.py --memray-report OUT.bin`` then lists every
allocation made between the two signals and still alive at the second, by where it was made
(``pip install memray``; the benchmark's own runs never need it).
"""

from __future__ import annotations

import collections
import ctypes
import gc
import json
import os
import re
import runpy
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _pymalloc() -> tuple[int, int]:
    """Python's small-object allocator: bytes of its arenas (mmapped apart from glibc's heap,
    so ``mallinfo2`` does not see them) and bytes in blocks in use, from
    ``sys._debugmallocstats()`` (it writes to fd 2: briefly redirected; every thread is idle
    when the benchmark probes)."""
    with tempfile.TemporaryFile(mode="w+") as f:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(f.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read()
    arenas = re.search(r"^(\d+) arenas \* (\d+) bytes/arena", text, re.M)
    blocks = re.search(r"^# bytes in allocated blocks\s*=\s*([\d,]+)", text, re.M)
    return (int(arenas[1]) * int(arenas[2]) if arenas else -1,
            int(blocks[1].replace(",", "")) if blocks else -1)


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return -1


def _probe() -> dict[str, Any]:
    """RSS as the benchmark sampled it, then, after a full collection (garbage waiting for
    the collector is not live memory), what is live and what the allocators keep."""
    import _sqlite3

    rss = _rss()
    collected = gc.collect()
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    sqlite = ctypes.CDLL(_sqlite3.__file__)  # resolves libsqlite3's symbols
    sqlite.sqlite3_memory_used.restype = ctypes.c_int64
    sqlite.sqlite3_memory_highwater.restype = ctypes.c_int64
    caches = [len(e._compiled_cache) for e in _ENGINES if e._compiled_cache is not None]
    objects = gc.get_objects()  # what the collector tracks, start-up's frozen ones aside
    types = collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in objects)
    n_objects = len(objects)
    del objects
    arenas, in_blocks = _pymalloc()
    return {"t": time.time(), "rss": rss, "rss_collected": _rss(), "collected": collected,
            "pymalloc_arenas": arenas, "pymalloc_used": in_blocks,
            "heap_in_use": info.uordblks, "heap_free": info.fordblks,
            "mmapped": info.hblkhd, "sqlite_used": sqlite.sqlite3_memory_used(),
            "sqlite_highwater": sqlite.sqlite3_memory_highwater(0),
            "py_blocks": sys.getallocatedblocks(), "gc_objects": n_objects,
            "gc_types": dict(types.most_common(40)), "compiled_cache": caches}


#: every SQLAlchemy engine serve builds (gc.get_objects() cannot find them: serve freezes
#: its start-up objects out of the collector's reach)
_ENGINES: list[Any] = []


def _record_engines() -> None:
    from sqlalchemy.engine import Engine

    init = Engine.__init__

    def __init__(self: Engine, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        _ENGINES.append(self)

    Engine.__init__ = __init__  # type: ignore[method-assign]


def _memory(argv: list[str]) -> None:
    _record_engines()
    probe_out = Path(argv[argv.index("--probe") + 1])
    memray_out = Path(argv[argv.index("--memray") + 1]) if "--memray" in argv else None
    tracker: list[Any] = []

    def _sample(_sig: int, _frame: FrameType | None) -> None:
        with probe_out.open("a") as f:
            f.write(json.dumps(_probe()) + "\n")

    def _start(_sig: int, _frame: FrameType | None) -> None:
        import memray

        assert memray_out is not None
        t = memray.Tracker(memray_out, native_traces=True,
                           file_format=memray.FileFormat.AGGREGATED_ALLOCATIONS)
        t.__enter__()
        tracker.append(t)

    def _stop(_sig: int, _frame: FrameType | None) -> None:
        gc.collect()  # garbage waiting for the collector is not what stays
        while tracker:
            tracker.pop().__exit__(None, None, None)

    signal.signal(signal.SIGPWR, _sample)
    if memray_out is not None:
        signal.signal(signal.SIGUSR1, _start)
        signal.signal(signal.SIGUSR2, _stop)


def _cpu(out: Path) -> None:
    import yappi

    def _start(_sig: int, _frame: FrameType | None) -> None:
        yappi.clear_stats()
        yappi.set_clock_type("cpu")
        yappi.start(builtins=False, profile_threads=True)

    def _stop(_sig: int, _frame: FrameType | None) -> None:
        yappi.stop()
        yappi.get_func_stats().save(str(out), type="pstat")
        with out.with_suffix(".threads.txt").open("w") as f:
            yappi.get_thread_stats().print_all(out=f)

    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)


def memray_leaks(path: Path, *, top: int = 25) -> list[tuple[int, int, str]]:
    """What a ``--memray`` capture holds: the allocations still alive when tracking stopped,
    summed by their nearest Python frames (bytes, allocations, where), largest first; new
    arenas of Python's own allocator summed apart (they hold whatever objects landed there).
    ``memray flamegraph --leaks`` shows the same, when memray can merge every native stack
    with its Python one (on some stacks it stops on an assertion: here such a stack is
    read without its native frames)."""
    from memray import FileReader

    sums: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for record in FileReader(path, report_progress=False).get_leaked_allocation_records(
            merge_threads=True):
        try:
            frames = record.hybrid_stack_trace(max_stacks=60)
        except AssertionError:
            frames = record.stack_trace(max_stacks=60)
        if any("new_arena" in f[0] for f in frames[:3]):
            where = "(new arenas of Python's object allocator)"
        else:
            py = [f"{f[0]} {'/'.join(f[1].split('/')[-2:])}:{f[2]}"
                  for f in frames if f[1].endswith(".py")][:3]
            where = " <- ".join(py) or " <- ".join(f[0] for f in frames[:4])
        sums[where][0] += record.size
        sums[where][1] += record.n_allocations
    ranked = sorted(((size, n, where) for where, (size, n) in sums.items()), reverse=True)
    return ranked[:top]


def main() -> None:
    if "--memray-report" in sys.argv:
        ranked = memray_leaks(Path(sys.argv[sys.argv.index("--memray-report") + 1]))
        print(f"alive at the end: {sum(size for size, _, _ in ranked) / 2**20:.2f} MB "
              f"in the {len(ranked)} largest places")
        for size, n, where in ranked:
            print(f"{size / 1024:10.1f} KB {n:7d}  {where}")
        return
    if "--probe" in sys.argv:
        _memory(sys.argv[1:])
    else:
        _cpu(Path(sys.argv[1]))
    sys.argv = ["geode", "serve"]
    runpy.run_module("geode", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
