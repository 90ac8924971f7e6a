"""Events a running turn streams to whoever drives it (CLI, IPC client, channel)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["EventSink", "LoopEvent", "model_wait_text"]

EventKind = Literal[
    "turn_started",
    "text_delta",
    "assistant_text",
    "tool_call",
    "tool_result",
    "model_retry",
    "model_waiting",
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


def model_wait_text(kind: str, data: dict[str, Any]) -> str | None:
    """The one-line human text of a ``model_waiting`` / ``model_retry`` event, else None.

    Terminals and channel progress messages show the same words.
    """
    attempt = f"attempt {data.get('attempt', '?')}/{data.get('max_attempts', '?')}"
    if kind == "model_waiting":
        return f"waiting for the model ({data.get('elapsed_s', '?')} s, {attempt})"
    if kind == "model_retry":
        why = str(data.get("error") or "error").replace("_", " ")
        return f"model call failed ({why}); retrying in {data.get('delay_s', '?')} s ({attempt})"
    return None
