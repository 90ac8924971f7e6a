"""Traces (OpenTelemetry, in-memory exporter and a loopback OTLP receiver) and per-model
metrics of turns, model calls and tool calls."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from geode.daemon import tracing
from geode.daemon.tracing import attach_tracing, service_resource, tracer_provider_from_env
from tests.daemon.conftest import CLI, DaemonMaker, env_for, run_ipc


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


async def test_a_turn_is_a_span_with_model_and_tool_call_children(
    make_daemon: DaemonMaker, home: Path, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    d = await make_daemon([{"tool": "list_dir", "input": {}}, "done"])
    assert d.runtime is not None
    attach_tracing(d.runtime.observers, provider)
    frames = await run_ipc(d.socket_path, {"type": "run", "id": "t", "prompt": "go",
                                           "cwd": str(home)})
    result = frames[-1]
    assert result["termination"] == "natural", result
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    turn = by_name["invoke_agent geode"]
    models = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    (tool,) = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    assert len(models) == 2 and tool.name == "execute_tool list_dir"
    sid = result["session_id"]
    assert turn.attributes["gen_ai.conversation.id"] == sid
    assert turn.attributes["geode.turn_id"] == result["turn_id"]
    assert turn.attributes["geode.termination"] == "natural"
    for child in (*models, tool):
        assert child.parent is not None and child.parent.span_id == turn.context.span_id
        assert child.context.trace_id == turn.context.trace_id
        assert child.attributes["gen_ai.conversation.id"] == sid
    first = min(models, key=lambda s: s.start_time)
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.request.model"]
    assert first.attributes["gen_ai.usage.input_tokens"] == 10  # the scripted model's usage
    assert first.attributes["gen_ai.usage.output_tokens"] > 0
    assert tool.attributes["gen_ai.tool.name"] == "list_dir"
    assert tool.attributes["geode.tool.status"] == "ok"


async def test_model_calls_tokens_and_errors_per_model_on_metrics(
    make_daemon: DaemonMaker, home: Path
) -> None:
    d = await make_daemon([{"tool": "list_dir", "input": {}}, "done"])
    await run_ipc(d.socket_path, {"type": "run", "id": "m", "prompt": "go", "cwd": str(home)})
    assert d.health is not None
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{d.health.port}/metrics")).text
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for f in text_string_to_metric_families(text) for s in f.samples}
    calls = {k: v for k, v in got.items() if k[0] == "geode_model_calls_total"}
    assert sum(calls.values()) == 2, calls
    (model,) = {dict(k[1])["model"] for k in calls}
    assert got[("geode_model_calls_total", (("model", model), ("outcome", "ok")))] == 2
    tokens = sum(v for (name, labels), v in got.items()
                 if name == "geode_model_tokens_total"
                 and dict(labels).get("model") == model and dict(labels)["direction"] == "input")
    assert tokens == 20  # the scripted model's 10 per call


def test_without_the_sdk_or_without_configuration_there_is_no_tracing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tracing, "_CONFIGURED", None)
    assert tracer_provider_from_env({}) is None  # installed but not configured
    assert tracer_provider_from_env({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert tracer_provider_from_env({"OTEL_SDK_DISABLED": "true",
                                     "OTEL_TRACES_EXPORTER": "console"}) is None
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # not installed
    assert tracer_provider_from_env({"OTEL_TRACES_EXPORTER": "console"}) is None


def test_the_service_is_called_geode_unless_the_otel_variables_say_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    assert service_resource().attributes["service.name"] == "geode"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=ops-bot,env=prod")
    assert service_resource().attributes["service.name"] == "ops-bot"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "geode-eu")
    assert service_resource().attributes["service.name"] == "geode-eu"


class _Collector(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        _Collector.bodies.append(self.path.encode() + b" " + self.rfile.read(length))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_geode_run_exports_its_spans_over_otlp_configured_by_otel_variables(
    home: Path,
) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    _Collector.bodies = []
    server = HTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = env_for(home, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{server.server_port}",
                      OTEL_SERVICE_NAME="geode-test")
        env.pop("OTEL_TRACES_EXPORTER", None)
        done = subprocess.run([*CLI, "run", "--demo", "What is in this folder?"], env=env,
                              cwd=home, capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr
    finally:
        server.shutdown()
    names, services = set(), set()
    for body in _Collector.bodies:
        path, _, payload = body.partition(b" ")
        assert path == b"/v1/traces"
        request = ExportTraceServiceRequest.FromString(payload)
        for rs in request.resource_spans:
            services |= {a.value.string_value for a in rs.resource.attributes
                         if a.key == "service.name"}
            for ss in rs.scope_spans:
                names |= {s.name for s in ss.spans}
    assert services == {"geode-test"}
    assert "invoke_agent geode" in names
    assert any(n.startswith("chat ") for n in names), names
    assert any(n.startswith("execute_tool ") for n in names), names
