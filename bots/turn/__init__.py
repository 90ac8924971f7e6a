"""The chat turn as phases: prepare -> run -> deliver, each returning the next step as a value,
driven by one ``match`` (:mod:`bots.turn.driver`)."""

from __future__ import annotations

from bots.bindings import session_overrides
from bots.turn.deliver import Deliverer, DeliverPhase
from bots.turn.driver import TurnRunner
from bots.turn.prepare import PreparePhase, compose_prompt
from bots.turn.run import (
    EntryOrder,
    ProgressReporter,
    RunPhase,
    friendly_failure,
    on_display,
)
from bots.turn.steps import (
    Accept,
    Answered,
    Done,
    Dropped,
    Prepared,
    Ready,
    Recover,
    Step,
    Turn,
    TurnDeps,
)

__all__ = [
    "Accept",
    "Answered",
    "DeliverPhase",
    "Deliverer",
    "Done",
    "Dropped",
    "EntryOrder",
    "PreparePhase",
    "Prepared",
    "ProgressReporter",
    "Ready",
    "Recover",
    "RunPhase",
    "Step",
    "Turn",
    "TurnDeps",
    "TurnRunner",
    "compose_prompt",
    "friendly_failure",
    "on_display",
    "session_overrides",
]
