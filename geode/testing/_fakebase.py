"""The part every wire-level chat fake shares: an aiohttp app on a random loopback port, an
outgoing client session (for deliveries to the code under test), and change notification for
:meth:`LoopbackFake.wait_until`."""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Self

import aiohttp
from aiohttp import web

__all__ = ["LoopbackFake"]


class LoopbackFake(ABC):
    """Base of :class:`~bots.testing.slack.FakeSlack` and
    :class:`~bots.testing.telegram.FakeTelegramServer`.

    A subclass builds its ``web.Application`` in ``start`` and hands it to :meth:`_serve`;
    its ``stop`` ends its own work, then calls :meth:`_close`. Every state change calls
    :meth:`_wake`.
    """

    def __init__(self) -> None:
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._port = 0
        #: the loopback port to listen on (0: any free one); a scenario that takes the fake
        #: down and up again (a platform outage) sets it so the code under test finds it
        self.listen_port = 0

    @property
    def port(self) -> int:
        return self._port

    @abstractmethod
    async def start(self) -> None:
        """Listen on a random loopback port (build the app, then :meth:`_serve` it)."""

    async def stop(self) -> None:
        """Stop serving."""
        await self._close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def wait_until(self, predicate: Callable[[], object], *, within: float = 5.0) -> None:
        """Wait until ``predicate()`` is truthy, re-checking on every state change of the fake.

        Raises:
            TimeoutError: it did not become true within ``within`` seconds.
        """
        async with asyncio.timeout(within):
            while not predicate():
                # Also re-check on a short tick: predicates may read client-side state too.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.02):
                        await self._changed.wait()

    async def _serve(self, app: web.Application) -> None:
        # handler_cancellation: a client that hangs up (a long poll, a socket) must not keep
        # a handler alive that would swallow the next update into a dead connection.
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.listen_port)
        await site.start()
        self._port = int(self._runner.addresses[0][1])

    async def _close(self) -> None:
        """Close the client session and the server."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _client_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    def _wake(self) -> None:
        # Waiters hold the old event; setting it wakes them all, a fresh one serves the next.
        self._changed.set()
        self._changed = asyncio.Event()
