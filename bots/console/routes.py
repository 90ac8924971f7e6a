"""The console's routes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from aiohttp import web

from bots.console import live, pages, signin
from bots.console.app import DEPS_KEY, ENV_KEY, ConsoleDeps, jinja_env, security

__all__ = ["build_app"]

_HERE = Path(__file__).resolve().parent


def build_app(deps: ConsoleDeps) -> web.Application:
    """The console's routes over ``deps``."""
    app = web.Application(middlewares=security(), client_max_size=64 * 1024)
    app[DEPS_KEY] = deps
    app[ENV_KEY] = jinja_env()
    feeds = app[live.FEEDS_KEY] = live.ThreadFeeds()

    async def close_feeds(_app: web.Application) -> None:
        await feeds.close()

    app.on_shutdown.append(close_feeds)
    app.router.add_get("/signin", signin.signin_page)
    app.router.add_post("/signin", signin.signin)
    app.router.add_post("/signout", signin.signout)
    app.router.add_get("/", pages.overview)
    app.router.add_get("/threads", pages.threads)
    app.router.add_get("/threads/{key}", pages.thread)
    app.router.add_get("/threads/{key}/events", live.thread_events)
    app.router.add_post("/threads/{key}/drop/{event}", pages.drop)
    app.router.add_post("/threads/{key}/stop", pages.stop)
    app.router.add_post("/threads/{key}/fork", pages.fork)
    app.router.add_get("/approvals", pages.approvals)
    app.router.add_post("/approvals/{id}", pages.decide)
    app.router.add_get("/usage", pages.usage)
    _platform_routes(app)
    app.router.add_get("/static/console.js", _static("console.js", "text/javascript"))
    app.router.add_get("/static/console.css", _static("console.css", "text/css"))
    return app


@runtime_checkable
class AddsConsolePages(Protocol):
    """A platform spec that adds pages to the console (the web chat's ``/chat``): its
    ``console_routes`` names ``"module:function"``, ``(app) -> None``; checked once."""

    console_routes: str


def _platform_routes(app: web.Application) -> None:
    """The pages platforms add, found through the registry: the console names none."""
    from bots.platforms import platform_specs, resolve

    for spec in platform_specs().values():
        if isinstance(spec, AddsConsolePages) and spec.console_routes:
            resolve(spec.console_routes)(app)


def _static(name: str, content_type: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    body = (_HERE / "static" / name).read_bytes()

    async def serve(_request: web.Request) -> web.Response:
        return web.Response(body=body, content_type=content_type,
                            headers={"Cache-Control": "max-age=300"})

    return serve
