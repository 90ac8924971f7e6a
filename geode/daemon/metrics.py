"""Prometheus metrics of a running daemon, fed by the Runtime's observation hooks.

Every event reaches them typed (frozen dataclasses they ``match`` on, never an event name):
:meth:`DaemonMetrics.on_loop_event` takes the loop's (a denied tool result carries the check
that denied it; :class:`~geode.loop.events.ModelCallFinished`, observer-only, feeds calls and
errors per model), :meth:`DaemonMetrics.on_event` the spend control's
(:mod:`geode.hooks.events`: :class:`~geode.hooks.events.UsageRecorded` feeds tokens and cost,
:class:`~geode.hooks.events.SpendCapReached` the refused calls). Both decide nothing and are
synchronous (the HookSystem runs them inline).

Model latency is the loop's own measure of each answered model call (retries included).

Another package counts its own events on the same ``/metrics`` through
:meth:`DaemonMetrics.extend`: its counters (an :class:`EventCounters`) are built once on
this registry and handed back; that package increments them itself where its events happen
(the chat layer's per-platform metrics, which the harness never names nor observes).

Each daemon owns a :class:`~prometheus_client.CollectorRegistry` (not the global one), so
several daemons (tests) never collide.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from geode._events import TypedEvent
from geode.hooks.events import ObservedEvent, SpendCapReached, UsageRecorded
from geode.loop.events import (
    ModelCallFinished,
    ModelResponded,
    ObservedLoopEvent,
    ToolResulted,
    TurnFinished,
    TurnStarted,
)

__all__ = ["CONTENT_TYPE", "DaemonMetrics", "EventCounters"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)
_WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300)


class EventCounters(Protocol):
    """Counters another package registers on the daemon's registry (built from it) and
    increments itself, inline where its events happen: what :meth:`DaemonMetrics.extend`
    builds. The daemon neither subscribes them to anything nor calls them."""


_Counters = TypeVar("_Counters", bound=EventCounters)


class DaemonMetrics:
    """The daemon's counters and histograms, and the observer that feeds them."""

    def __init__(self, *, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.turns = Counter("geode_turns", "Turns finished, by termination reason.",
                             ["termination"], registry=r)
        self.tool_calls = Counter("geode_tool_calls", "Tool calls, by result status.",
                                  ["status"], registry=r)
        self.denials = Counter("geode_tool_denials", "Denied tool calls, by the check that denied.",
                               ["check"], registry=r)
        self.model_latency = Histogram("geode_model_latency_seconds",
                                       "Time from handing a request to the model to its answer.",
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.lane_wait = Histogram("geode_lane_wait_seconds", "Time spent waiting for lanes.",
                                   ["kind"], buckets=_WAIT_BUCKETS, registry=r)
        self.lane_busy = Counter("geode_lane_busy", "Requests refused after the lane wait bound.",
                                 ["kind"], registry=r)
        self.turns_running = Gauge("geode_turns_running", "Turns running now.", registry=r)
        self.schedule_runs = Counter("geode_schedule_runs", "Scheduled job runs, by outcome.",
                                     ["outcome"], registry=r)
        self.ipc_errors = Counter("geode_ipc_protocol_errors",
                                  "IPC connections closed for a bad frame.", registry=r)
        self.model_tokens = Counter("geode_model_tokens",
                                    "Model tokens as reported by the provider, by binding "
                                    "(platform:channel, empty outside channels), model, platform "
                                    "and direction (input/output).",
                                    ["binding", "model", "platform", "direction"], registry=r)
        self.model_cost = Counter("geode_model_cost_usd",
                                  "Model cost in USD, for models with a configured price.",
                                  ["binding", "model", "platform"], registry=r)
        self.spend_caps_reached = Counter("geode_spend_caps_reached",
                                          "Model calls refused by a spend cap, by cap.",
                                          ["cap", "binding", "platform"], registry=r)
        self.model_calls = Counter("geode_model_calls", "Model calls (retries included), by "
                                   "model and outcome.", ["model", "outcome"], registry=r)
        self.model_errors = Counter("geode_model_errors", "Failed model calls, by model and "
                                    "error kind.", ["model", "kind"], registry=r)
        #: another package's counters by the callable that built them (:meth:`extend`)
        self._extensions: dict[Callable[[CollectorRegistry], EventCounters], EventCounters] = {}

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def lane_waited(self, kind: str, waited_s: float, outcome: str) -> None:
        """The LaneQueue's ``on_wait`` observer."""
        self.lane_wait.labels(kind=kind).observe(waited_s)
        if outcome == "busy":
            self.lane_busy.labels(kind=kind).inc()

    #: the loop events :meth:`on_loop_event` counts (the others are not delivered to it)
    LOOP_EVENTS: ClassVar[tuple[type, ...]] = (TurnStarted, ModelResponded, ToolResulted,
                                               TurnFinished, ModelCallFinished)

    def on_loop_event(self, session_id: str, event: ObservedLoopEvent) -> None:
        """The typed loop observer (``HookSystem.subscribe_loop``; sync, quick)."""
        match event:
            case TurnStarted():
                self.turns_running.inc()
            case ModelResponded(latency_s=latency):
                self.model_latency.observe(latency)
            case ToolResulted(status=status, check=check):
                self.tool_calls.labels(status=status).inc()
                if status == "denied":
                    self.denials.labels(check=check or "unknown").inc()
            case TurnFinished(termination=termination):
                self.turns_running.dec()
                self.turns.labels(termination=termination).inc()
            case ModelCallFinished(model=model, outcome=outcome, error=error):
                model, outcome = model or "unknown", outcome or "unknown"
                self.model_calls.labels(model=model, outcome=outcome).inc()
                if outcome != "ok":
                    self.model_errors.labels(model=model, kind=error or "unknown").inc()
            case _:
                pass

    #: the events :meth:`on_event` counts (the others are not delivered to it)
    EVENTS: ClassVar[tuple[type[TypedEvent], ...]] = (UsageRecorded, SpendCapReached)

    def on_event(self, event: ObservedEvent) -> None:
        """The typed observer (``HookSystem.subscribe_events``) of the spend control's
        events; the executor's are counted from the loop's ``ToolResulted``; another
        package counts its own on the counters it added (:meth:`extend`)."""
        match event:
            case UsageRecorded(binding=binding, platform=platform, model=model, cost_usd=cost):
                labels = {"binding": binding, "model": model, "platform": platform}
                self.model_tokens.labels(direction="input", **labels).inc(event.input_tokens)
                self.model_tokens.labels(direction="output", **labels).inc(event.output_tokens)
                if cost is not None:
                    self.model_cost.labels(**labels).inc(cost)
            case SpendCapReached(cap=cap, binding=binding, platform=platform):
                self.spend_caps_reached.labels(cap=cap, binding=binding, platform=platform).inc()
            case _:
                pass

    def extend(self, build: Callable[[CollectorRegistry], _Counters]) -> _Counters:
        """Another package's counters on this registry.

        Built by ``build(self.registry)`` at the first call; a later call with the same
        ``build`` (a second connector on the same daemon, a restart) returns the same
        counters: a metric's name registers once per registry. The package increments them
        itself; nothing here feeds them.
        """
        counters = self._extensions.get(build)
        if counters is None:
            counters = self._extensions[build] = build(self.registry)
        return counters  # type: ignore[return-value]  # keyed by its own build
