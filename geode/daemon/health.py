"""HTTP health endpoint of ``geode serve`` (aiohttp), on ``health_host`` (default loopback).

* ``GET /healthz`` — liveness: 200 while the event loop answers.
* ``GET /readyz`` — readiness: 200 when the store answers a ping within 2 s, every
  connector says it is ready, every supervised component (a platform's connection and
  intake, each pump, lease keeper, listener: :mod:`geode.daemon.supervisor`) is up and has
  made progress within its staleness bound, and the daemon is not draining; 503 otherwise.
  The JSON body names each check and component with its detail, so an operator sees
  *what* is not ready and why (``"<platform>.connection": {"ok": false, "detail": "down for
  12s: cannot reach the platform's API at … (attempt 4; next in 8.0s)"}``).
* ``GET /metrics`` — Prometheus text format (see :mod:`geode.daemon.metrics`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import structlog
from aiohttp import web

from geode.daemon.metrics import CONTENT_TYPE, DaemonMetrics
from geode.daemon.supervisor import Component
from geode.errors import ConfigError
from geode.secret_redaction import redact_text

__all__ = ["HealthServer", "ReadyCheck"]

log = structlog.get_logger(__name__)

#: returns (ok, detail) for one named readiness check
ReadyCheck = Callable[[], Awaitable[tuple[bool, str]]]

_PING_TIMEOUT_S = 2.0


class HealthServer:
    """Serves /healthz, /readyz and /metrics on ``host:port``."""

    def __init__(
        self,
        *,
        metrics: DaemonMetrics,
        checks: dict[str, ReadyCheck],
        port: int,
        host: str = "127.0.0.1",
        components: Callable[[], Iterable[Component]] | None = None,
    ) -> None:
        self.metrics = metrics
        self.checks = checks
        #: the supervised components reported beside the checks (read at each request:
        #: connectors add theirs as they connect)
        self.components = components
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise ConfigError(
                f"cannot listen for health checks on {self.host}:{self.port} "
                f"({exc.strerror or exc}). Set health_port in config.toml (or "
                "GEODE_HEALTH_PORT) to a free port."
            ) from exc
        if self.port == 0:  # an ephemeral port: report the one we got
            server = getattr(site, "_server", None)
            sockets = getattr(server, "sockets", None) or []
            if sockets:
                self.port = int(sockets[0].getsockname()[1])
        log.info("health.listening", host=self.host, port=self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        results: dict[str, Any] = {}
        ok = True
        for name, check in self.checks.items():
            try:
                async with asyncio.timeout(_PING_TIMEOUT_S):
                    passed, detail = await check()
            except TimeoutError:
                passed, detail = False, f"no answer within {_PING_TIMEOUT_S:.0f}s"
            except Exception as exc:  # a failing check is "not ready", never a 500
                passed, detail = False, f"{type(exc).__name__}: {exc}"[:200]
            results[name] = {"ok": passed, "detail": detail}
            ok = ok and passed
        for comp in self.components() if self.components is not None else ():
            passed, detail = comp.status()
            results[comp.name] = {"ok": passed, "detail": detail}
            ok = ok and passed
        # what failed is often a library's words (a URL, a DSN): masked, as its log line is
        # (here and on the console's overview, which shows the same checks)
        for result in results.values():
            result["detail"] = redact_text(str(result["detail"]))
        return ok, results

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def _readyz(self, _request: web.Request) -> web.Response:
        ok, results = await self.readiness()
        return web.json_response({"ready": ok, "checks": results}, status=200 if ok else 503)

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = self.metrics.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
