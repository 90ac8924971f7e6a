"""Events a running turn streams to whoever drives it (CLI, IPC client, channel) and to the
observers (metrics, the timeline, the ledger): a union of frozen dataclasses.

Consumers ``match`` on the type. Each event also has a wire name (:attr:`kind`, a class
constant) and :attr:`data` (its fields as a dict; the shared base
:class:`geode._events.TypedEvent`): the IPC socket sends ``{"kind", "data"}`` frames and
name-based observers get ``(kind, data)``, so those shapes stay what they were.

:data:`LoopEvent` is what the driver streams; the observers also get the observer-only
:data:`ModelCallEvent` (:data:`ObservedLoopEvent` is both), which no terminal or channel shows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias

from geode._events import TypedEvent

__all__ = [
    "AssistantText",
    "CheckpointSaved",
    "Compacted",
    "EventSink",
    "LoopEvent",
    "LoopGuard",
    "ModelCallEvent",
    "ModelCallFinished",
    "ModelCallStarted",
    "ModelFailed",
    "ModelResponded",
    "ModelRetrying",
    "ModelWaiting",
    "ObservedLoopEvent",
    "ResultCut",
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


@dataclass(frozen=True, kw_only=True)
class TurnStarted(TypedEvent):
    """A turn starts, or (``resumed``) continues after a crash for the ``recoveries``-th time."""

    kind: ClassVar[str] = "turn_started"
    turn_id: str
    resumed: bool = False
    recoveries: int = 0


@dataclass(frozen=True, kw_only=True)
class TextDelta(TypedEvent):
    kind: ClassVar[str] = "text_delta"
    text: str


@dataclass(frozen=True, kw_only=True)
class AssistantText(TypedEvent):
    kind: ClassVar[str] = "assistant_text"
    text: str


@dataclass(frozen=True, kw_only=True)
class ModelResponded(TypedEvent):
    """One model call answered (after any retries)."""

    kind: ClassVar[str] = "model_response"
    turn_id: str
    model: str
    stop_reason: str | None
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class ModelFailed(TypedEvent):
    """A model call failed for good (classified ``error_kind``) or ran out of time."""

    kind: ClassVar[str] = "model_error"
    turn_id: str
    model: str
    error_kind: str
    detail: str = ""
    latency_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class ModelWaiting(TypedEvent):
    """Nothing has come from the model for ``waiting_notice_s``: the call is still running."""

    kind: ClassVar[str] = "model_waiting"
    elapsed_s: int
    attempt: int
    max_attempts: int


@dataclass(frozen=True, kw_only=True)
class ModelRetrying(TypedEvent):
    """A model call failed retryably (``error`` kind); attempt ``attempt`` follows."""

    kind: ClassVar[str] = "model_retry"
    error: str
    delay_s: float
    attempt: int
    max_attempts: int


@dataclass(frozen=True, kw_only=True)
class ToolProposed(TypedEvent):
    """The model proposed a call; it is not a permission (the executor checks it)."""

    kind: ClassVar[str] = "tool_call"
    id: str
    name: str
    input: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ToolResulted(TypedEvent):
    """A proposed call's result, with its status as data."""

    kind: ClassVar[str] = "tool_result"
    id: str
    name: str
    status: ToolStatus
    text: str = ""
    #: the check that denied the call (``status == "denied"``)
    check: str | None = None


@dataclass(frozen=True, kw_only=True)
class Compacted(TypedEvent):
    """The conversation was made to fit the window: ``shortened`` large tool results were
    replaced by their head and result id, ``dropped`` middle messages were left out."""

    kind: ClassVar[str] = "compacted"
    dropped: int
    shortened: int = 0


@dataclass(frozen=True, kw_only=True)
class LoopGuard(TypedEvent):
    """A stuck-loop guard told the model (``noted``) or ended the turn (``stopped``):
    ``repeated_call`` (the same call failing the same way) or ``no_progress`` (rounds in
    which every call failed); ``count`` of ``limit``."""

    kind: ClassVar[str] = "loop_guard"
    guard: Literal["repeated_call", "no_progress"]
    action: Literal["noted", "stopped"]
    count: int
    limit: int
    tool: str = ""


@dataclass(frozen=True, kw_only=True)
class ResultCut(TypedEvent):
    """A tool result was over the size limit: the model got ``shown_chars`` of its
    ``total_chars`` (head and tail); the whole is kept as ``result_id`` (read_result)."""

    kind: ClassVar[str] = "result_cut"
    call_id: str
    tool: str
    result_id: str
    total_chars: int
    shown_chars: int


@dataclass(frozen=True, kw_only=True)
class VerifyPassed(TypedEvent):
    """The stop proposal was accepted by the verifier."""

    kind: ClassVar[str] = "verify_passed"
    turn_id: str


@dataclass(frozen=True, kw_only=True)
class VerifyFailed(TypedEvent):
    """The stop proposal was refused; a repair round follows unless the budget is spent."""

    kind: ClassVar[str] = "verify_failed"
    turn_id: str
    reason: str
    attempt: int


@dataclass(frozen=True, kw_only=True)
class CheckpointSaved(TypedEvent):
    kind: ClassVar[str] = "checkpoint"
    point: str


@dataclass(frozen=True, kw_only=True)
class TurnFinished(TypedEvent):
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
    | CheckpointSaved | TurnFinished | LoopGuard | ResultCut
)


# -- observer-only: metrics and traces per model call; no terminal or channel shows them -----


@dataclass(frozen=True, kw_only=True)
class _ModelCall(TypedEvent):
    turn_id: str
    model: str
    provider: str


@dataclass(frozen=True, kw_only=True)
class ModelCallStarted(_ModelCall):
    """A model call (with its retries) starts, in round ``round``."""

    kind: ClassVar[str] = "model_call_started"
    round: int


@dataclass(frozen=True, kw_only=True)
class ModelCallFinished(_ModelCall):
    """A model call ended: ``outcome`` ``ok`` (with its usage and cost) or ``error``
    (``error``: the classified kind, or ``timeout``), after ``attempts`` attempts."""

    kind: ClassVar[str] = "model_call_finished"
    outcome: str
    error: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    stop_reason: str = ""
    attempts: int = 1


ModelCallEvent: TypeAlias = ModelCallStarted | ModelCallFinished

#: what the loop's observers get (``Observer.loop_event``): the driver's stream and the
#: observer-only model call events
ObservedLoopEvent: TypeAlias = LoopEvent | ModelCallEvent

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
