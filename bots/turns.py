"""Moved: the chat turn is the package :mod:`bots.turn` (prepare -> run -> deliver). These
names stay importable from here until every importer uses :mod:`bots.turn`."""

from __future__ import annotations

from bots.turn import (
    EntryOrder,
    TurnDeps,
    TurnRunner,
    compose_prompt,
    friendly_failure,
    session_overrides,
)

__all__ = [
    "EntryOrder",
    "TurnDeps",
    "TurnRunner",
    "compose_prompt",
    "friendly_failure",
    "session_overrides",
]
