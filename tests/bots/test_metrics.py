"""The channel layer's metrics (:mod:`bots.metrics`): the chat layer counts its own events
(:mod:`bots.observed`) on the daemon's registry, inline where they happen (the counters
observe no published event); the harness names none of them."""

from __future__ import annotations

import ast
from pathlib import Path

from bots.metrics import ChannelMetrics
from bots.observed import (
    DeliveryRetried,
    MessagesReceived,
    RateLimited,
    ReplySent,
    ThreadLeaseLost,
    ThreadLeases,
    ThreadsTakenOver,
)
from geode.daemon.metrics import DaemonMetrics
from geode.hooks import HookSystem

GEODE = Path(__file__).resolve().parents[2] / "geode"

#: what /metrics showed of these events when the harness counted them (timestamps aside):
#: names, labels, help texts and values are the operators' contract
BEFORE = [
    '# HELP geode_channel_threads_held Threads whose lease this replica holds, per platform.',
    '# TYPE geode_channel_threads_held gauge',
    'geode_channel_threads_held{platform="telegram"} 3.0',
    '# HELP geode_channel_thread_takeovers_total Threads taken over from a stopped or dead '
    'replica.',
    '# TYPE geode_channel_thread_takeovers_total counter',
    'geode_channel_thread_takeovers_total{platform="telegram"} 1.0',
    '# HELP geode_channel_thread_leases_lost_total Threads another replica took while this '
    'one ran them.',
    '# TYPE geode_channel_thread_leases_lost_total counter',
    'geode_channel_thread_leases_lost_total{platform="discord"} 1.0',
    '# HELP geode_channel_messages_received_total Platform events recorded, per platform.',
    '# TYPE geode_channel_messages_received_total counter',
    'geode_channel_messages_received_total{platform="telegram"} 2.0',
    '# HELP geode_channel_replies_sent_total Replies delivered, per platform.',
    '# TYPE geode_channel_replies_sent_total counter',
    'geode_channel_replies_sent_total{platform="telegram"} 1.0',
    "# HELP geode_channel_reply_latency_seconds From a message's intake to its delivered reply.",
    '# TYPE geode_channel_reply_latency_seconds histogram',
    'geode_channel_reply_latency_seconds_bucket{le="0.5",platform="telegram"} 0.0',
    'geode_channel_reply_latency_seconds_bucket{le="1.0",platform="telegram"} 0.0',
    'geode_channel_reply_latency_seconds_bucket{le="2.0",platform="telegram"} 1.0',
    'geode_channel_reply_latency_seconds_bucket{le="5.0",platform="telegram"} 1.0',
    'geode_channel_reply_latency_seconds_bucket{le="10.0",platform="telegram"} 1.0',
    'geode_channel_reply_latency_seconds_bucket{le="20.0",platform="telegram"} 1.0',
    'geode_channel_reply_latency_seconds_bucket{le="30.0",platform="telegram"} 1.0',
    'geode_channel_reply_latency_seconds_bucket{le="60.0",platform="telegram"} 1.0',
    'geode_channel_reply_latency_seconds_bucket{le="120.0",platform="telegram"} 1.0',
    'geode_channel_reply_latency_seconds_bucket{le="300.0",platform="telegram"} 1.0',
    'geode_channel_reply_latency_seconds_bucket{le="600.0",platform="telegram"} 1.0',
    'geode_channel_reply_latency_seconds_bucket{le="+Inf",platform="telegram"} 1.0',
    'geode_channel_reply_latency_seconds_count{platform="telegram"} 1.0',
    'geode_channel_reply_latency_seconds_sum{platform="telegram"} 1.5',
    '# HELP geode_channel_deliveries_retried_total Reply deliveries tried again after a failure.',
    '# TYPE geode_channel_deliveries_retried_total counter',
    'geode_channel_deliveries_retried_total{platform="slack"} 1.0',
    "# HELP geode_channel_rate_limited_total Rate-limit answers (HTTP 429, RetryAfter) to the "
    "layer's sends, per platform.",
    '# TYPE geode_channel_rate_limited_total counter',
    'geode_channel_rate_limited_total{platform="slack"} 1.0',
]


def _count_as_the_sites_do(channels: ChannelMetrics) -> None:
    """What the intake, the deliverer, a connector and the lease keeper increment, inline,
    for the events :func:`_events` names (each site increments the prometheus objects)."""
    channels.messages_received.labels(platform="telegram").inc(2)  # the intake
    channels.replies_sent.labels(platform="telegram").inc()  # the deliverer
    channels.reply_latency.labels(platform="telegram").observe(max(0.0, 1.5))
    channels.deliveries_retried.labels(platform="slack").inc()
    channels.rate_limited.labels(platform="slack").inc()  # the deliverer or a connector
    channels.threads_held.labels(platform="telegram").set(3)  # the lease keeper
    channels.thread_takeovers.labels(platform="telegram").inc(1)
    channels.thread_leases_lost.labels(platform="discord").inc()


def _events() -> list[object]:
    return [MessagesReceived(platform="telegram", count=2),
            ReplySent(platform="telegram", latency_s=1.5), DeliveryRetried(platform="slack"),
            RateLimited(platform="slack"), ThreadLeases(platform="telegram", held=3),
            ThreadsTakenOver(platform="telegram", count=1), ThreadLeaseLost(platform="discord")]


def _channel_lines(metrics: DaemonMetrics) -> list[str]:
    return [line for line in metrics.render().decode().splitlines()
            if line.startswith(("geode_channel", "# HELP geode_channel", "# TYPE geode_channel"))
            and "_created" not in line]


def test_the_channel_metrics_on_the_daemons_registry_read_as_they_did() -> None:
    metrics = DaemonMetrics()
    _count_as_the_sites_do(metrics.extend(ChannelMetrics))
    assert _channel_lines(metrics) == BEFORE


def test_the_counters_observe_no_published_event() -> None:
    # the typed events still go to the daemon's observers (hooks, plugins); the counters
    # are incremented where the thing happens, not by a subscription to them
    metrics, observers = DaemonMetrics(), HookSystem()
    metrics.extend(ChannelMetrics)
    seen: list[object] = []
    observers.subscribe_events(seen.append, only=tuple(type(e) for e in _events()))
    for event in _events():
        observers.publish(event)  # type: ignore[arg-type]
    assert seen == _events()
    assert [line for line in _channel_lines(metrics) if not line.startswith("#")] == []
    assert not hasattr(ChannelMetrics, "on_event")
    # plain attributes only: no method of ours between a site and its prometheus object
    assert [name for name, value in vars(ChannelMetrics).items()
            if callable(value) and name != "__init__"] == []


def test_one_set_of_counters_per_daemon_however_many_layers_ask() -> None:
    metrics = DaemonMetrics()
    first = metrics.extend(ChannelMetrics)
    assert metrics.extend(ChannelMetrics) is first  # no duplicate names
    first.replies_sent.labels(platform="slack").inc()
    assert first.replies_sent.labels(platform="slack")._value.get() == 1  # counted once
    # a second connector's layer (or a restarted one) gets the same counters
    again = metrics.extend(ChannelMetrics)
    assert again is first
    again.replies_sent.labels(platform="slack").inc()
    assert first.replies_sent.labels(platform="slack")._value.get() == 2


def test_the_harness_neither_defines_nor_counts_a_chat_event() -> None:
    # the daemon's own registry has no channel metric until the layer adds its counters
    assert "geode_channel" not in DaemonMetrics().render().decode()
    kinds = [node.value.value for path in GEODE.rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
             and node.target.id == "kind" and isinstance(node.value, ast.Constant)]
    assert kinds  # the harness's own events are found
    assert [k for k in kinds if str(k).startswith("channel.")] == []
