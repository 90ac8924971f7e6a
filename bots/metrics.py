"""The chat layer's Prometheus metrics, per platform, on the daemon's ``/metrics``.

:class:`ChannelMetrics` registers its counters on the registry of the daemon that hosts the
layer (:meth:`bots.port.TurnHost.add_metrics`, once per daemon however many connectors it
hosts: they share one instance). The layer hands that instance to the components that count,
and each increments the prometheus_client objects inline, where the thing happens (the
usual instrumentation style; nothing of ours in between): the intake counts messages
received, the deliverer replies sent (with the latency from the message's intake to its
delivered reply), deliveries retried and rate-limit answers (HTTP 429 / ``RetryAfter``), a
connector the rate-limit answers its SDK sleeps off, and the lease keeper the thread leases
held, taken over and lost. A component built without them (tests, the CLI) counts nothing.

The same facts are still published as typed events (:mod:`bots.observed`) to the daemon's
observers (shell hooks, plugins, traces); these counters do not subscribe to them. Names,
labels and help texts are the operators' contract (the Grafana dashboard in ``deploy/``
queries them).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["ChannelMetrics"]

_REPLY_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)


class ChannelMetrics:
    """The channel layer's counters on ``registry``: plain attributes the counting components
    increment themselves (no method of this class sits between a site and its counter)."""

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
