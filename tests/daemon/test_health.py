"""Health endpoint: liveness, readiness that follows the store, Prometheus metrics."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import make_url

from geode.daemon import Daemon
from geode.daemon.serve import describe
from tests.daemon.conftest import DaemonMaker, run_ipc

WRITE = {"tool": "write_file", "input": {"path": "o.txt", "content": "x"}}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def _get(d: Daemon, path: str) -> httpx.Response:
    assert d.health is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{d.health.port}") as client:
        return await client.get(path)


async def test_metrics_count_turns_tool_calls_denials_latency_and_lane_waits(
    make_daemon: DaemonMaker, home: Path
) -> None:
    d = await make_daemon([{"tool": "list_dir", "input": {}}, WRITE, "done"])
    frames = await run_ipc(d.socket_path, {"type": "run", "id": "m", "prompt": "go",
                                           "cwd": str(home)}, lambda _m: "deny")
    assert frames[-1]["termination"] == "natural"

    live = await _get(d, "/healthz")
    assert live.status_code == 200 and live.json() == {"status": "alive"}
    ready = await _get(d, "/readyz")
    assert ready.status_code == 200, ready.text
    assert set(ready.json()["checks"]) == {"store", "connectors", "intake", "model", "scheduler"}

    resp = await _get(d, "/metrics")
    assert resp.headers["content-type"].startswith("text/plain")
    got = _samples(resp.text)
    assert got[("geode_turns_total", (("termination", "natural"),))] == 1
    assert got[("geode_tool_calls_total", (("status", "ok"),))] == 1
    assert got[("geode_tool_calls_total", (("status", "denied"),))] == 1
    assert got[("geode_tool_denials_total", (("check", "approval"),))] == 1
    assert got[("geode_model_latency_seconds_count", ())] == 3  # three model calls
    assert got[("geode_lane_wait_seconds_count", (("kind", "cli"),))] == 1
    assert got[("geode_turns_running", ())] == 0


class _Proxy:
    """A TCP forwarder to PostgreSQL that the test can cut, like a network partition."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self, port: int = 0) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(*self.target)
        except OSError:
            w.close()
            return
        self.writers |= {w, uw}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(r, uw), pipe(ur, w))

    async def cut(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in list(self.writers):
            w.transport.abort()
        self.writers.clear()
        await self.server.wait_closed()


@pytest.mark.postgres
async def test_readyz_fails_while_the_store_is_unreachable(
    make_daemon: DaemonMaker, pg_url: str
) -> None:
    url = make_url(pg_url)
    proxy = _Proxy(url.host or "127.0.0.1", url.port or 5432)
    await proxy.start()
    via_proxy = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    d = await make_daemon(["ok"], env={"GEODE_STORE__URL": via_proxy})
    assert (await _get(d, "/readyz")).status_code == 200

    await proxy.cut()
    down = await _get(d, "/readyz")
    assert down.status_code == 503
    body: dict[str, Any] = down.json()
    assert body["ready"] is False and body["checks"]["store"]["ok"] is False
    assert body["checks"]["intake"]["ok"] is True  # only the store is the problem
    assert (await _get(d, "/healthz")).status_code == 200  # alive all the same

    await proxy.start(proxy.port)  # the network comes back
    assert (await _get(d, "/readyz")).status_code == 200
    await proxy.cut()


async def test_readyz_is_503_while_draining_and_names_unready_connectors(
    make_daemon: DaemonMaker,
) -> None:
    class Conn:
        ready = False
        started = stopped = False

        async def start(self) -> None:
            self.started = True

        async def stop(self) -> None:
            self.stopped = True

    d = await make_daemon(["ok"])
    assert d.connectors == []
    d._started = False  # allow adding after start for this check only
    c = Conn()
    d.add_connector(c)
    body = (await _get(d, "/readyz")).json()
    assert body["checks"]["connectors"] == {"ok": False, "detail": "not ready: Conn"}
    c.ready = True
    assert (await _get(d, "/readyz")).status_code == 200
    d.draining = True
    resp = await _get(d, "/readyz")
    assert resp.status_code == 503 and resp.json()["checks"]["intake"]["detail"] == "draining"
    d.draining = False
    await d.shutdown()
    assert c.stopped  # connectors are stopped first at shutdown


async def test_readyz_says_the_default_model_has_no_credential(home: Path) -> None:
    """Issue #23 item 5: `geode serve` without a usable credential for its default model
    starts (bindings, pairing and `sessions` still work) but is not ready, and says why."""
    from geode.settings import load_settings

    env = {"GEODE_HOME": str(home), "GEODE_HEALTH_PORT": "0"}
    settings, secrets = load_settings(env=env, cwd=home)
    d = Daemon(settings=settings, secrets=secrets)
    await d.start()
    try:
        resp = await _get(d, "/readyz")
        assert resp.status_code == 503
        model = resp.json()["checks"]["model"]
        assert model["ok"] is False and "ANTHROPIC_API_KEY" in model["detail"]
        assert any(line.startswith("  model   NOT READY (claude-opus-5-5): ")
                   for line in describe(d))
    finally:
        await d.shutdown()
    settings, secrets = load_settings(env={**env, "ANTHROPIC_API_KEY": "sk-ant-test"}, cwd=home)
    d = Daemon(settings=settings, secrets=secrets)
    await d.start()
    try:
        resp = await _get(d, "/readyz")
        assert resp.status_code == 200, resp.text
        assert resp.json()["checks"]["model"] == {"ok": True, "detail": "claude-opus-5-5"}
        assert "  model   claude-opus-5-5" in describe(d)
    finally:
        await d.shutdown()
