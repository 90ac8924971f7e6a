"""``geode serve`` under yappi (CPU clock, every thread), for ``bench_blackbox.py --profile``.

Profiles only between SIGUSR1 (start) and SIGUSR2 (stop, then the stats are written), so
start-up and warm-up stay out of it. yappi slows Python-heavy code several times over:
read the profile for where the CPU goes, and the benchmark's unprofiled run for how much.

    python benchmarks/_profiled_serve.py OUT.pstat   (then: python -m pstats OUT.pstat)
"""

from __future__ import annotations

import runpy
import signal
import sys
from pathlib import Path
from types import FrameType

import yappi

OUT = Path(sys.argv[1])


def _start(_sig: int, _frame: FrameType | None) -> None:
    yappi.clear_stats()
    yappi.set_clock_type("cpu")
    yappi.start(builtins=False, profile_threads=True)


def _stop(_sig: int, _frame: FrameType | None) -> None:
    yappi.stop()
    yappi.get_func_stats().save(str(OUT), type="pstat")
    with OUT.with_suffix(".threads.txt").open("w") as f:
        yappi.get_thread_stats().print_all(out=f)


signal.signal(signal.SIGUSR1, _start)
signal.signal(signal.SIGUSR2, _stop)
sys.argv = ["geode", "serve"]
runpy.run_module("geode", run_name="__main__", alter_sys=True)
