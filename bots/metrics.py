"""The chat layer's Prometheus metrics, per platform, on the daemon's ``/metrics``.

:class:`ChannelMetrics` registers its counters on the registry of the daemon that hosts the
layer (:meth:`bots.port.TurnHost.add_metrics`, once per daemon however many connectors it
hosts) and counts the layer's typed events (:mod:`bots.observed`): messages received,
replies sent (with the latency from the message's intake to its delivered reply),
deliveries retried, rate-limit answers (HTTP 429 / ``RetryAfter``), and the thread leases
held, taken over and lost. Names, labels and help texts are the operators' contract (the
Grafana dashboard in ``deploy/`` queries them).
"""

from __future__ import annotations

from typing import ClassVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from bots.observed import (
    DeliveryRetried,
    MessagesReceived,
    RateLimited,
    ReplySent,
    ThreadLeaseLost,
    ThreadLeases,
    ThreadsTakenOver,
)
from geode._events import TypedEvent

__all__ = ["ChannelMetrics"]

_REPLY_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)


class ChannelMetrics:
    """The channel layer's counters on ``registry``, and the observer that feeds them."""

    #: the events :meth:`on_event` counts (the others are not delivered to it)
    EVENTS: ClassVar[tuple[type[TypedEvent], ...]] = (
        MessagesReceived, ReplySent, DeliveryRetried, RateLimited, ThreadLeases,
        ThreadsTakenOver, ThreadLeaseLost)

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.threads_held = Gauge("geode_channel_threads_held",
                                  "Threads whose lease this replica holds, per platform.",
                                  ["platform"], registry=r)
        self.thread_takeovers = Counter("geode_channel_thread_takeovers",
                                        "Threads taken over from a stopped or dead replica.",
                                        ["platform"], registry=r)
        self.thread_leases_lost = Counter("geode_channel_thread_leases_lost",
                                          "Threads another replica took while this one ran them.",
                                          ["platform"], registry=r)
        self.messages_received = Counter("geode_channel_messages_received",
                                         "Platform events recorded, per platform.",
                                         ["platform"], registry=r)
        self.replies_sent = Counter("geode_channel_replies_sent",
                                    "Replies delivered, per platform.", ["platform"], registry=r)
        self.reply_latency = Histogram("geode_channel_reply_latency_seconds",
                                       "From a message's intake to its delivered reply.",
                                       ["platform"], buckets=_REPLY_BUCKETS, registry=r)
        self.deliveries_retried = Counter("geode_channel_deliveries_retried",
                                          "Reply deliveries tried again after a failure.",
                                          ["platform"], registry=r)
        self.rate_limited = Counter("geode_channel_rate_limited",
                                    "Rate-limit answers (HTTP 429, RetryAfter) to the layer's "
                                    "sends, per platform.", ["platform"], registry=r)

    def on_event(self, event: TypedEvent) -> None:
        """The typed observer (``HookSystem.subscribe_events``, sync and quick) of the
        layer's events (its intake, lease keeper, deliverer and the connectors)."""
        match event:
            case MessagesReceived(platform=platform, count=count):
                self.messages_received.labels(platform=platform).inc(count)
            case ReplySent(platform=platform, latency_s=latency):
                self.replies_sent.labels(platform=platform).inc()
                if latency is not None:
                    self.reply_latency.labels(platform=platform).observe(max(0.0, latency))
            case DeliveryRetried(platform=platform):
                self.deliveries_retried.labels(platform=platform).inc()
            case RateLimited(platform=platform):
                self.rate_limited.labels(platform=platform).inc()
            case ThreadLeases(platform=platform, held=held):
                self.threads_held.labels(platform=platform).set(held)
            case ThreadsTakenOver(platform=platform, count=count):
                self.thread_takeovers.labels(platform=platform).inc(count)
            case ThreadLeaseLost(platform=platform):
                self.thread_leases_lost.labels(platform=platform).inc()
            case _:
                pass
