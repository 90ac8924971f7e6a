"""A loopback server standing for an address a download must never reach (GEODE's own
``/metrics``, an attacker's host): it records each request and the headers it carried."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web

from geode.testing.loopback import serve_app

LOOT = b"geode_turns_total 4\n# GEODE's own /metrics, or anything else not the platform's\n"


@dataclass
class Evil:
    port: int = 0
    hits: list[dict[str, str]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@asynccontextmanager
async def evil_server(redirect_to: str | None = None) -> AsyncIterator[Evil]:
    """Serves ``LOOT`` on any path (or redirects there to ``redirect_to``)."""
    evil = Evil()

    async def any_path(request: web.Request) -> web.StreamResponse:
        evil.hits.append({"path": request.path, **dict(request.headers)})
        if redirect_to is not None:
            raise web.HTTPFound(redirect_to)
        return web.Response(body=LOOT)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_path)
    async with serve_app(app) as port:
        evil.port = port
        yield evil
