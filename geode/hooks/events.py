"""The observer-only events of the executor and the chat layer: unions of frozen dataclasses.

The loop's events live in :mod:`geode.loop.events`; these are the other two vocabularies the
daemon's observers (metrics, evidence) see. They live here, in ``geode``, so the daemon can
``match`` on the channel layer's events without importing ``bots`` (``bots`` imports this
module and constructs them). :meth:`geode.hooks.HookSystem.publish` hands them typed to
``subscribe_events`` observers and, as ``(kind, data)``, to the name-based ones, so those
names and payloads stay what they were.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias

__all__ = [
    "ChannelEvent",
    "DeliveryRetried",
    "MessagesReceived",
    "ObservedEvent",
    "RateLimited",
    "ReplySent",
    "ThreadLeaseLost",
    "ThreadLeases",
    "ThreadsTakenOver",
    "ToolDenied",
    "ToolEvent",
    "ToolFinished",
    "ToolStarted",
]


class _Observed:
    kind: ClassVar[str]

    @property
    def data(self) -> dict[str, Any]:
        """The event's fields (what name-based observers get with :attr:`kind`)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


# -- the chat layer (bots) ------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MessagesReceived(_Observed):
    """Platform events recorded by the layer's intake."""

    kind: ClassVar[str] = "channel.messages_received"
    platform: str
    count: int


@dataclass(frozen=True, kw_only=True)
class ReplySent(_Observed):
    """A reply delivered; ``latency_s`` from its message's intake (None when unknown)."""

    kind: ClassVar[str] = "channel.reply_sent"
    platform: str
    latency_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class DeliveryRetried(_Observed):
    """A reply delivery tried again after a failure."""

    kind: ClassVar[str] = "channel.delivery_retried"
    platform: str


@dataclass(frozen=True, kw_only=True)
class RateLimited(_Observed):
    """A rate-limit answer (HTTP 429, ``RetryAfter``) to one of the layer's sends."""

    kind: ClassVar[str] = "channel.rate_limited"
    platform: str


@dataclass(frozen=True, kw_only=True)
class ThreadLeases(_Observed):
    """The thread leases this replica holds after a renewal."""

    kind: ClassVar[str] = "channel.thread_leases"
    platform: str
    held: int


@dataclass(frozen=True, kw_only=True)
class ThreadsTakenOver(_Observed):
    """Threads taken over from a stopped or dead replica."""

    kind: ClassVar[str] = "channel.threads_taken_over"
    platform: str
    count: int


@dataclass(frozen=True, kw_only=True)
class ThreadLeaseLost(_Observed):
    """A thread another replica took while this one ran it."""

    kind: ClassVar[str] = "channel.thread_lease_lost"
    platform: str


ChannelEvent: TypeAlias = (
    MessagesReceived | ReplySent | DeliveryRetried | RateLimited | ThreadLeases
    | ThreadsTakenOver | ThreadLeaseLost
)


# -- the executor ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ToolStarted(_Observed):
    """A cleared tool call is dispatched."""

    kind: ClassVar[str] = "tool.started"
    session_id: str
    turn_id: str
    call_id: str
    tool: str


@dataclass(frozen=True, kw_only=True)
class ToolFinished(_Observed):
    """A dispatched tool call ended with ``status`` (the executor's outcome status)."""

    kind: ClassVar[str] = "tool.finished"
    session_id: str
    turn_id: str
    call_id: str
    tool: str
    status: str


@dataclass(frozen=True, kw_only=True)
class ToolDenied(_Observed):
    """A tool call refused by ``check`` before it ran."""

    kind: ClassVar[str] = "tool.denied"
    session_id: str
    turn_id: str
    call_id: str
    tool: str
    check: str
    reason: str


ToolEvent: TypeAlias = ToolStarted | ToolFinished | ToolDenied

#: what :meth:`geode.hooks.HookSystem.publish` carries
ObservedEvent: TypeAlias = ChannelEvent | ToolEvent
