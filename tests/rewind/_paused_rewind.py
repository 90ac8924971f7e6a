"""Test-only launcher: ``python _paused_rewind.py POINT MARKER ARGS...`` runs ``geode ARGS...``
and freezes the process at a point of a rewind (``geode.rewind.apply.PAUSE``), so the test
can SIGKILL it there. ``POINT#N``: the N-th time the point is reached.

Reachable only through this file of the test suite, as ``tests/scenarios/_paused_geode.py``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from geode.rewind import apply


def main() -> None:
    point, marker, *args = sys.argv[1:]
    name, _, nth = point.partition("#")
    wanted, seen = int(nth or 1), 0

    def pause(reached: str) -> None:
        nonlocal seen
        if reached != name:
            return
        seen += 1
        if seen == wanted:
            Path(marker).write_text(point)
            time.sleep(3600)  # the test kills the process here

    apply.PAUSE = pause
    sys.argv = ["geode", *args]
    from geode.cli import main as geode_main

    geode_main()


if __name__ == "__main__":
    main()
