"""deploy/grafana-dashboard.json queries only metrics (and labels) `geode serve` exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from bots.metrics import ChannelMetrics
from geode.daemon.metrics import DaemonMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"
_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def _exported() -> dict[str, set[str]]:
    """Sample name -> its label names, for every metric of the daemon (the channel layer's
    are added to its registry by the layer, as ``geode serve`` does)."""
    out: dict[str, set[str]] = {}
    daemon = DaemonMetrics()
    channels = ChannelMetrics(daemon.registry)
    for metric in [*vars(daemon).values(), *vars(channels).values()]:
        if isinstance(metric, MetricWrapperBase):
            labels = set(metric._labelnames)
            for suffix in _SUFFIXES[metric._type]:
                out[metric._name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return out


def test_every_panel_queries_exported_metrics_by_their_labels() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = _exported()
    assert dashboard["panels"]
    seen = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            names = set(re.findall(r"\b(geode_[a-z_]+)\b", expr))
            assert len(names) == 1, expr  # one metric per query: its labels are checkable
            metric = names.pop()
            assert metric in exported, f"{panel['title']}: {metric} is not exported"
            seen.add(metric)
            for group in re.findall(r"by \(([^)]*)\)", expr):
                for label in (x.strip() for x in group.split(",")):
                    assert label in exported[metric] | {"instance", "job"}, (
                        f"{panel['title']}: {metric} has no label {label!r}")
    # what the issue asks an operator to see is on the dashboard
    for metric in ("geode_channel_messages_received_total", "geode_channel_replies_sent_total",
                   "geode_channel_reply_latency_seconds_bucket",
                   "geode_channel_deliveries_retried_total", "geode_channel_rate_limited_total",
                   "geode_model_calls_total", "geode_model_errors_total",
                   "geode_model_tokens_total", "geode_model_cost_usd_total"):
        assert metric in seen, metric
