"""The harness's observer-only events beside the loop's: the executor's and the spend
control's, unions of frozen dataclasses (on the shared base :class:`geode._events.TypedEvent`).

The loop's events live in :mod:`geode.loop.events`. :meth:`geode.hooks.HookSystem.publish`
carries any typed event (:data:`ObservedEvent`): these, and those another package defines
for its own observers (the chat layer's, in ``bots.observed``, counted by its own metrics),
so the harness names no chat event. It hands them typed to ``subscribe_events`` observers
(metrics, evidence) and, as ``(kind, data)``, to the name-based ones, so those names and
payloads stay what they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from geode._events import TypedEvent

__all__ = [
    "HarnessEvent",
    "ObservedEvent",
    "SpendCapReached",
    "SpendEvent",
    "ToolDenied",
    "ToolEvent",
    "ToolFinished",
    "ToolStarted",
    "UsageRecorded",
]


# -- the executor ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _ToolCall(TypedEvent):
    """An event of one proposed tool call."""

    session_id: str
    turn_id: str
    call_id: str
    tool: str


@dataclass(frozen=True, kw_only=True)
class ToolStarted(_ToolCall):
    """A cleared tool call is dispatched."""

    kind: ClassVar[str] = "tool.started"


@dataclass(frozen=True, kw_only=True)
class ToolFinished(_ToolCall):
    """A dispatched tool call ended with ``status`` (the executor's outcome status)."""

    kind: ClassVar[str] = "tool.finished"
    status: str


@dataclass(frozen=True, kw_only=True)
class ToolDenied(_ToolCall):
    """A tool call refused by ``check`` before it ran."""

    kind: ClassVar[str] = "tool.denied"
    check: str
    reason: str


ToolEvent: TypeAlias = ToolStarted | ToolFinished | ToolDenied


# -- the spend control (geode.daemon.spend) -------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UsageRecorded(TypedEvent):
    """A model call's usage, as written to the usage ledger (``cost_usd`` None: no price)."""

    kind: ClassVar[str] = "usage.recorded"
    session_id: str
    #: ``platform:channel`` of the channel binding; "" outside channels
    binding: str
    platform: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float | None


@dataclass(frozen=True, kw_only=True)
class SpendCapReached(TypedEvent):
    """A model call refused by spend cap ``cap`` before it was made."""

    kind: ClassVar[str] = "spend.cap_reached"
    session_id: str
    cap: str
    binding: str
    platform: str


SpendEvent: TypeAlias = UsageRecorded | SpendCapReached

#: the harness's own published events
HarnessEvent: TypeAlias = ToolEvent | SpendEvent

#: what :meth:`geode.hooks.HookSystem.publish` carries: any typed event, the harness's
#: (:data:`HarnessEvent`) and another package's (the chat layer's); observers ``match`` on
#: the classes they know and take only those (``subscribe_events(..., only=...)``)
ObservedEvent: TypeAlias = TypedEvent
