"""What the chat layer tells the daemon's observers: its events, frozen dataclasses on the
harness's shared base (:class:`geode._events.TypedEvent`).

The layer's intake, lease keeper and deliverer (and a connector, for a rate-limit answer)
hand them to :meth:`bots.port.TurnHost.publish`; the daemon's
:class:`~geode.hooks.HookSystem` gives them typed to ``subscribe_events`` observers and, as
``(kind, data)``, to the name-based ones (shell hooks, plugins), so their names and payloads
are part of the contract. The harness never names them: it carries any typed event. (The
channel metrics, :mod:`bots.metrics`, are counted where each thing happens, not from them.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from geode._events import TypedEvent

__all__ = [
    "ChannelEvent",
    "DeliveryRetried",
    "MessagesReceived",
    "RateLimited",
    "ReplySent",
    "ThreadLeaseLost",
    "ThreadLeases",
    "ThreadsTakenOver",
]


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
