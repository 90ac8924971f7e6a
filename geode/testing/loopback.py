"""An aiohttp app served on a free loopback port for as long as a block runs: the one-off
server of a test (a redirector, an endless download, a webhook receiver)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

__all__ = ["serve_app"]


@contextlib.asynccontextmanager
async def serve_app(app: web.Application) -> AsyncIterator[int]:
    """Serve ``app`` on ``127.0.0.1`` at a free port; yields the port, cleans up after."""
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()
