"""OpenTelemetry traces of turns, model calls and tool calls (the optional ``otel`` extra).

A typed observer of the Runtime's loop events (``match`` on their classes), like the metrics:
it decides nothing. Per turn
one ``invoke_agent geode`` span; inside it one ``chat {model}`` span per model call (GenAI
semantic conventions: ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` /
``output_tokens``, ``gen_ai.response.finish_reasons``, ``error.type``) and one
``execute_tool {name}`` span per tool call. Every span carries ``gen_ai.conversation.id`` (the
session id: a channel thread's session id names its platform, channel and thread), and the turn
span the thread's ``geode.platform`` / ``geode.channel`` / ``geode.thread`` when a channel
started it.

Configuration is OpenTelemetry's own: with the SDK installed (``pip install
'geode-agent[otel]'``) and a global tracer provider set (``opentelemetry-instrument``), GEODE
uses it; otherwise GEODE sets one up when ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``) or
an ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`` is set, and the exporter reads the rest
(``OTEL_SERVICE_NAME``, ``OTEL_EXPORTER_OTLP_PROTOCOL``, headers, ...). Without the SDK, or
with ``OTEL_SDK_DISABLED=true``, nothing is set up and no span is made.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog

from geode.loop.events import (
    ModelCallFinished,
    ModelCallStarted,
    ModelRetrying,
    ObservedLoopEvent,
    ToolProposed,
    ToolResulted,
    TurnFinished,
    TurnStarted,
)

if TYPE_CHECKING:
    from geode.hooks.system import HookSystem

__all__ = ["TurnTracer", "attach_tracing", "service_resource", "tracer_provider_from_env"]

log = structlog.get_logger(__name__)

#: the provider GEODE set up from the environment (once per process)
_CONFIGURED: Any = None


def tracer_provider_from_env(env: Mapping[str, str] | None = None) -> Any | None:
    """The tracer provider to use, or None for no tracing (see the module docstring).

    The ``OTEL_*`` variables are OpenTelemetry's standard ones, read here and by its SDK.
    """
    global _CONFIGURED
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    wanted = any(env.get(k) for k in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                                      "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    if not wanted and "opentelemetry.trace" not in sys.modules:
        return None  # nothing asks for traces: not even the import (CLI start-up time)
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:  # the otel extra is not installed: tracing is off
        return None
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):  # set by the operator (opentelemetry-instrument)
        return current
    if _CONFIGURED is not None:
        return _CONFIGURED
    exporters = [e.strip() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()]
    if not exporters and (env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                          or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        exporters = ["otlp"]
    exporters = [e for e in exporters if e != "none"]
    if not exporters:
        return None
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=service_resource())
    for name in exporters:
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(env)))
        else:
            log.warning("otel.unknown_exporter", exporter=name)
    trace.set_tracer_provider(provider)
    _CONFIGURED = provider
    return provider


def service_resource() -> Any:
    """The SDK's resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), named ``geode``
    where the SDK would say ``unknown_service``."""
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "geode"}))
    return resource


def _otlp_exporter(env: Mapping[str, str]) -> Any:
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter()


class TurnTracer:
    """Turns the typed loop events of one Runtime into spans (a sync loop observer)."""

    def __init__(self, provider: Any) -> None:
        from geode import __version__

        self._tracer = provider.get_tracer("geode", __version__)
        self._turns: dict[str, Any] = {}  # session_id -> the running turn's span
        self._models: dict[str, Any] = {}  # session_id -> the running model call's span
        self._tools: dict[tuple[str, str], Any] = {}  # (session_id, call id) -> span

    def attach(self, observers: HookSystem) -> None:
        observers.subscribe_loop(self)

    def __call__(self, session_id: str, event: ObservedLoopEvent) -> None:
        try:
            self._on(session_id, event)
        except Exception:  # observation never breaks a turn
            log.debug("otel.observer_failed", event_name=event.kind, exc_info=True)

    def _on(self, sid: str, event: ObservedLoopEvent) -> None:
        match event:
            case TurnStarted():
                self._turn_started(sid, event)
            case ModelCallStarted(model=model, provider=provider, round=rnd):
                self._models[sid] = self._child(sid, f"chat {model}", {
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                    "gen_ai.provider.name": provider, "gen_ai.conversation.id": sid,
                    "geode.round": rnd,
                })
            case ModelRetrying(error=error, attempt=attempt):
                span = self._models.get(sid)
                if span is not None:
                    span.add_event("retry", {"error.type": error, "geode.attempt": attempt})
            case ModelCallFinished():
                self._model_finished(sid, event)
            case ToolProposed(id=call_id, name=name):
                self._tools[(sid, call_id)] = self._child(sid, f"execute_tool {name}", {
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": call_id, "gen_ai.conversation.id": sid,
                })
            case ToolResulted(id=call_id, status=status):
                span = self._tools.pop((sid, call_id), None)
                if span is not None:
                    span.set_attribute("geode.tool.status", status)
                    if status != "ok":
                        self._fail(span, status)
                    span.end()
            case TurnFinished():
                self._turn_finished(sid, event)
            case _:
                pass

    def _turn_started(self, sid: str, event: TurnStarted) -> None:
        attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent",
                                 "gen_ai.agent.name": "geode", "gen_ai.conversation.id": sid,
                                 "geode.session_id": sid, "geode.turn_id": event.turn_id,
                                 "geode.resumed": event.resumed}
        # the channel layer binds the thread for the whole turn (bots.router.Router.dispatch)
        bound = structlog.contextvars.get_contextvars()
        for key in ("platform", "channel", "thread"):
            if bound.get(key):
                attrs[f"geode.{key}"] = str(bound[key])
        old = self._turns.pop(sid, None)
        if old is not None:
            old.end()
        self._turns[sid] = self._tracer.start_span("invoke_agent geode", attributes=attrs)

    def _model_finished(self, sid: str, event: ModelCallFinished) -> None:
        span = self._models.pop(sid, None)
        if span is None:
            return
        span.set_attribute("gen_ai.usage.input_tokens", event.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", event.output_tokens)
        span.set_attribute("geode.attempts", event.attempts or 1)
        if event.stop_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [event.stop_reason])
        if event.cost_usd:
            span.set_attribute("geode.cost_usd", event.cost_usd)
        if event.outcome != "ok":
            self._fail(span, event.error or "error")
        span.end()

    def _turn_finished(self, sid: str, event: TurnFinished) -> None:
        # a cancelled turn can leave a model or tool span open: close them with it
        for key in [k for k in self._tools if k[0] == sid]:
            self._tools.pop(key).end()
        model = self._models.pop(sid, None)
        if model is not None:
            model.end()
        span = self._turns.pop(sid, None)
        if span is None:
            return
        span.set_attribute("geode.termination", event.termination)
        span.set_attribute("geode.rounds", event.rounds)
        if event.termination != "natural":  # the only success (geode.loop.SUCCESS_REASONS)
            self._fail(span, event.termination)
        span.end()

    def _child(self, sid: str, name: str, attrs: dict[str, Any]) -> Any:
        from opentelemetry import trace

        parent = self._turns.get(sid)
        ctx = trace.set_span_in_context(parent) if parent is not None else None
        return self._tracer.start_span(name, context=ctx, attributes=attrs)

    @staticmethod
    def _fail(span: Any, error_type: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", error_type)
        span.set_status(Status(StatusCode.ERROR, error_type))


def attach_tracing(observers: HookSystem, provider: Any | None = None) -> TurnTracer | None:
    """Trace this Runtime's turns when OpenTelemetry is configured; else do nothing."""
    provider = provider if provider is not None else tracer_provider_from_env()
    if provider is None:
        return None
    tracer = TurnTracer(provider)
    tracer.attach(observers)
    return tracer
