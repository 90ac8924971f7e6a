"""The observer-only events of the executor, the chat layer and the spend control: unions of
frozen dataclasses (on the shared base :class:`geode._events.TypedEvent`).

The loop's events live in :mod:`geode.loop.events`; these are the other vocabularies the
daemon's observers (metrics, evidence) see. They live here, in ``geode``, so the daemon can
``match`` on the channel layer's events without importing ``bots`` (``bots`` imports this
module and constructs them). :meth:`geode.hooks.HookSystem.publish` hands them typed to
``subscribe_events`` observers and, as ``(kind, data)``, to the name-based ones, so those
names and payloads stay what they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from geode._events import TypedEvent

__all__ = [
    "ChannelEvent",
    "DeliveryRetried",
    "MessagesReceived",
    "ObservedEvent",
    "RateLimited",
    "ReplySent",
    "SpendCapReached",
    "SpendEvent",
    "ThreadLeaseLost",
    "ThreadLeases",
    "ThreadsTakenOver",
    "ToolDenied",
    "ToolEvent",
    "ToolFinished",
    "ToolStarted",
    "UsageRecorded",
]


# -- the chat layer (bots) ------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _OnPlatform(TypedEvent):
    """A channel event of one platform (its metrics are labelled by it)."""

    platform: str


@dataclass(frozen=True, kw_only=True)
class MessagesReceived(_OnPlatform):
    """Platform events recorded by the layer's intake."""

    kind: ClassVar[str] = "channel.messages_received"
    count: int


@dataclass(frozen=True, kw_only=True)
class ReplySent(_OnPlatform):
    """A reply delivered; ``latency_s`` from its message's intake (None when unknown)."""

    kind: ClassVar[str] = "channel.reply_sent"
    latency_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class DeliveryRetried(_OnPlatform):
    """A reply delivery tried again after a failure."""

    kind: ClassVar[str] = "channel.delivery_retried"


@dataclass(frozen=True, kw_only=True)
class RateLimited(_OnPlatform):
    """A rate-limit answer (HTTP 429, ``RetryAfter``) to one of the layer's sends."""

    kind: ClassVar[str] = "channel.rate_limited"


@dataclass(frozen=True, kw_only=True)
class ThreadLeases(_OnPlatform):
    """The thread leases this replica holds after a renewal."""

    kind: ClassVar[str] = "channel.thread_leases"
    held: int


@dataclass(frozen=True, kw_only=True)
class ThreadsTakenOver(_OnPlatform):
    """Threads taken over from a stopped or dead replica."""

    kind: ClassVar[str] = "channel.threads_taken_over"
    count: int


@dataclass(frozen=True, kw_only=True)
class ThreadLeaseLost(_OnPlatform):
    """A thread another replica took while this one ran it."""

    kind: ClassVar[str] = "channel.thread_lease_lost"


ChannelEvent: TypeAlias = (
    MessagesReceived | ReplySent | DeliveryRetried | RateLimited | ThreadLeases
    | ThreadsTakenOver | ThreadLeaseLost
)


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

#: what :meth:`geode.hooks.HookSystem.publish` carries
ObservedEvent: TypeAlias = ChannelEvent | ToolEvent | SpendEvent
