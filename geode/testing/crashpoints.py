"""Freeze a GEODE process at a named point of a turn, so a test can SIGKILL it there.

Installed only by the test suite (``tests/scenarios/_paused_geode.py`` wraps the CLI): no
config key or environment variable reaches it, so a project file cannot. At the point the
process writes the marker file and blocks its event loop, exactly as a process would look to
the outside if it died there. Points:

- ``turn_start``      the user message is checkpointed, the model not yet asked
- ``model_response``  the model answered; its tool batch is not saved yet
- ``batch_proposed``  the batch is saved; no tool has started
- ``batch_done``      the tool results are saved; the next model call not yet made
- ``turn_finished``   the turn's final checkpoint is written

``<point>#N`` pauses at the N-th time the point is reached in this process (``batch_proposed#3``:
the third round's batch is saved), so a test can stop a turn in a given round.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

__all__ = ["POINTS", "install_pause"]

POINTS = ("turn_start", "model_response", "batch_proposed", "batch_done", "turn_finished")


def install_pause(observers: Any, point: str, marker: Path) -> None:
    name_part, _, nth = point.partition("#")
    if name_part not in POINTS or (nth and not nth.isdigit()):
        raise ValueError(f"unknown pause point {point!r}; expected one of {POINTS} (or POINT#N)")
    wanted = int(nth) if nth else 1
    seen = 0

    def observe(event: str, data: Any) -> None:
        nonlocal seen
        name = data.get("point") if event == "checkpoint" else event
        if name != name_part:
            return
        seen += 1
        if seen == wanted:
            marker.write_text(point)
            # Deliberately block the whole process: the test kills it here.
            time.sleep(3600)

    observers.subscribe(observe)
