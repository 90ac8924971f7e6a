"""The console's routes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

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
    app.router.add_get("/approvals", pages.approvals)
    app.router.add_post("/approvals/{id}", pages.decide)
    app.router.add_get("/usage", pages.usage)
    app.router.add_get("/static/console.js", _static("console.js", "text/javascript"))
    app.router.add_get("/static/console.css", _static("console.css", "text/css"))
    return app


def _static(name: str, content_type: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    body = (_HERE / "static" / name).read_bytes()

    async def serve(_request: web.Request) -> web.Response:
        return web.Response(body=body, content_type=content_type,
                            headers={"Cache-Control": "max-age=300"})

    return serve
