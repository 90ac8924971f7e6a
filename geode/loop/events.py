"""Events a running turn streams to whoever drives it (CLI, IPC client, channel) and to the
observers (metrics, the timeline, the ledger): a union of frozen dataclasses.

Consumers ``match`` on the type. Each event also has a wire name (:attr:`kind`, a class
constant) and :attr:`data` (its fields as a dict): the IPC socket sends ``{"kind", "data"}``
frames and name-based observers get ``(kind, data)``, so those shapes stay what they were.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

__all__ = [
    "AssistantText",
    "CheckpointSaved",
    "Compacted",
    "EventSink",
    "LoopEvent",
    "ModelFailed",
    "ModelResponded",
    "ModelRetrying",
    "ModelWaiting",
    "TextDelta",
    "ToolProposed",
    "ToolResulted",
    "ToolStatus",
    "TurnFinished",
    "TurnStarted",
    "VerifyFailed",
    "VerifyPassed",
    "model_wait_text",
]

#: a tool result's status: ``denied`` names the check (``ToolResulted.check``); ``uncertain``
#: means the effect may or may not have happened (never re-run automatically)
ToolStatus = Literal["ok", "error", "denied", "uncertain"]


class _Event:
    kind: ClassVar[str]

    @property
    def data(self) -> dict[str, Any]:
        """The event's fields (the IPC frame's ``data``, the name-based observers' view)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class TurnStarted(_Event):
    """A turn starts, or (``resumed``) continues after a crash for the ``recoveries``-th time."""

    kind: ClassVar[str] = "turn_started"
    turn_id: str
    resumed: bool = False
    recoveries: int = 0


@dataclass(frozen=True, kw_only=True)
class TextDelta(_Event):
    kind: ClassVar[str] = "text_delta"
    text: str


@dataclass(frozen=True, kw_only=True)
class AssistantText(_Event):
    kind: ClassVar[str] = "assistant_text"
    text: str


@dataclass(frozen=True, kw_only=True)
class ModelResponded(_Event):
    """One model call answered (after any retries)."""

    kind: ClassVar[str] = "model_response"
    turn_id: str
    model: str
    stop_reason: str | None
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class ModelFailed(_Event):
    """A model call failed for good (classified ``error_kind``) or ran out of time."""

    kind: ClassVar[str] = "model_error"
    turn_id: str
    model: str
    error_kind: str
    detail: str = ""
    latency_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class ModelWaiting(_Event):
    """Nothing has come from the model for ``waiting_notice_s``: the call is still running."""

    kind: ClassVar[str] = "model_waiting"
    elapsed_s: int
    attempt: int
    max_attempts: int


@dataclass(frozen=True, kw_only=True)
class ModelRetrying(_Event):
    """A model call failed retryably (``error`` kind); attempt ``attempt`` follows."""

    kind: ClassVar[str] = "model_retry"
    error: str
    delay_s: float
    attempt: int
    max_attempts: int


@dataclass(frozen=True, kw_only=True)
class ToolProposed(_Event):
    """The model proposed a call; it is not a permission (the executor checks it)."""

    kind: ClassVar[str] = "tool_call"
    id: str
    name: str
    input: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ToolResulted(_Event):
    """A proposed call's result, with its status as data."""

    kind: ClassVar[str] = "tool_result"
    id: str
    name: str
    status: ToolStatus
    text: str = ""
    #: the check that denied the call (``status == "denied"``)
    check: str | None = None


@dataclass(frozen=True, kw_only=True)
class Compacted(_Event):
    kind: ClassVar[str] = "compacted"
    dropped: int


@dataclass(frozen=True, kw_only=True)
class VerifyPassed(_Event):
    """The stop proposal was accepted by the verifier."""

    kind: ClassVar[str] = "verify_passed"
    turn_id: str


@dataclass(frozen=True, kw_only=True)
class VerifyFailed(_Event):
    """The stop proposal was refused; a repair round follows unless the budget is spent."""

    kind: ClassVar[str] = "verify_failed"
    turn_id: str
    reason: str
    attempt: int


@dataclass(frozen=True, kw_only=True)
class CheckpointSaved(_Event):
    kind: ClassVar[str] = "checkpoint"
    point: str


@dataclass(frozen=True, kw_only=True)
class TurnFinished(_Event):
    kind: ClassVar[str] = "turn_finished"
    turn_id: str
    termination: str
    detail: str = ""
    rounds: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


LoopEvent = (
    TurnStarted | TextDelta | AssistantText | ModelWaiting | ModelRetrying | ModelResponded
    | ModelFailed | ToolProposed | ToolResulted | Compacted | VerifyPassed | VerifyFailed
    | CheckpointSaved | TurnFinished
)

EventSink = Callable[[LoopEvent], Awaitable[None]]


def model_wait_text(kind: str, data: Mapping[str, Any]) -> str | None:
    """The one-line human text of a ``model_waiting`` / ``model_retry`` event, else None.

    Takes the wire shape (``kind``, ``data``), so a terminal reading IPC frames and a
    channel's progress message show the same words.
    """
    attempt = f"attempt {data.get('attempt', '?')}/{data.get('max_attempts', '?')}"
    if kind == "model_waiting":
        return f"waiting for the model ({data.get('elapsed_s', '?')} s, {attempt})"
    if kind == "model_retry":
        why = str(data.get("error") or "error").replace("_", " ")
        return f"model call failed ({why}); retrying in {data.get('delay_s', '?')} s ({attempt})"
    return None
