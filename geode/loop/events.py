"""Events a running turn streams to whoever drives it (CLI, IPC client, channel)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["EventSink", "LoopEvent"]

EventKind = Literal[
    "turn_started",
    "text_delta",
    "assistant_text",
    "tool_call",
    "tool_result",
    "model_retry",
    "compacted",
    "verify_failed",
    "turn_finished",
    "checkpoint",
    "model_response",
]


@dataclass(frozen=True)
class LoopEvent:
    kind: EventKind
    data: dict[str, Any] = field(default_factory=dict)


EventSink = Callable[[LoopEvent], Awaitable[None]]
