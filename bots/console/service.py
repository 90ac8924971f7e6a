"""The console inside ``geode serve``: hosted in the daemon's connector slot (started once
the store is open, stopped before it closes), listening on ``[console] listen``.

Where it may listen is checked when the configuration is read
(:class:`geode.settings.ConsoleSettings`): a non-loopback address needs an https
``public_url`` or ``allow_insecure_http = true``, or ``geode serve`` exits 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import structlog

from geode.settings import console_listen

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from aiohttp import web

    from bots.console.app import RunningTurn
    from geode.settings import Settings
    from geode.store.database import Database

__all__ = ["Console", "ConsoleHost", "base_url", "signin_url"]

log = structlog.get_logger(__name__)


class _Readiness(Protocol):
    async def readiness(self) -> tuple[bool, dict[str, Any]]: ...


class ConsoleHost(Protocol):
    """What the console needs of ``geode serve``: the database (the chat layer's
    ``TurnHost`` has it; ``geode.daemon.Daemon`` is one)."""

    @property
    def database(self) -> Database | None: ...


class _LaneStats(Protocol):
    @property
    def running(self) -> int: ...

    @property
    def waiting(self) -> int: ...

    @property
    def sessions(self) -> int: ...

    @property
    def long_running(self) -> int: ...


class _Lanes(Protocol):
    global_cap: int

    @property
    def stats(self) -> _LaneStats: ...


@runtime_checkable
class ShowsLanes(Protocol):
    """A host whose lanes the Overview shows (the daemon's LaneQueue); checked once."""

    @property
    def lanes(self) -> _Lanes: ...


@runtime_checkable
class ShowsReadiness(Protocol):
    """A host whose readiness checks the Overview shows (the daemon's health server);
    checked once, when the console starts."""

    @property
    def health(self) -> _Readiness | None: ...


@runtime_checkable
class ShowsConnectors(Protocol):
    """A host whose connectors' running turns the thread page shows and stops (the
    daemon); checked once, when the console starts."""

    @property
    def connectors(self) -> Sequence[object]: ...


class _TurnRegistry(Protocol):
    @property
    def active(self) -> Mapping[str, RunningTurn]: ...


@runtime_checkable
class _HasLayer(Protocol):
    """A channel connector: its layer (None until started) holds the running turns."""

    @property
    def layer(self) -> _TurnRegistry | None: ...


def running_turns(connectors: Sequence[object]) -> Callable[[str], RunningTurn | None]:
    """The lookup of a thread's running (or lane-waiting) turn in this process: the
    registry of each connector's layer, the one ``/stop`` in the thread acts on."""

    def find(thread_key: str) -> RunningTurn | None:
        for c in connectors:
            layer = c.layer if isinstance(c, _HasLayer) else None
            turn = layer.active.get(thread_key) if layer is not None else None
            if turn is not None:
                return turn
        return None

    return find


def base_url(settings: Settings, *, port: int | None = None) -> str:
    """The console's address as people reach it: ``public_url``, else ``http://`` and
    ``listen`` (``port``: the one actually bound, when ``listen`` asked for 0)."""
    console = settings.console
    if console.public_url.strip():
        return console.public_url.strip().rstrip("/")
    host, listen_port = console_listen(console.listen)
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{listen_port if port is None else port}"


def signin_url(base: str, token: str) -> str:
    return f"{base}/signin?token={token}"


class Console:
    """The operator console's web server, hosted by the daemon."""

    def __init__(self, *, host: ConsoleHost, settings: Settings) -> None:
        self._host = host
        self._settings = settings
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    @property
    def ready(self) -> bool:
        return self._runner is not None

    def readiness(self) -> tuple[bool, str]:
        return (True, "console") if self.ready else (False, "console: not listening")

    @property
    def url(self) -> str:
        return base_url(self._settings, port=self.port)

    async def start(self) -> None:
        from aiohttp import web

        from bots.console.app import ConsoleDeps
        from bots.console.routes import build_app
        from geode.store import Store

        store = self._host.database
        if not isinstance(store, Store):
            raise RuntimeError("the console starts after the daemon's store is open")
        health = self._host.health if isinstance(self._host, ShowsReadiness) else None
        lanes = self._host.lanes if isinstance(self._host, ShowsLanes) else None

        def lane_use() -> dict[str, int]:
            assert lanes is not None
            st = lanes.stats
            return {"running": st.running, "waiting": st.waiting, "sessions": st.sessions,
                    "long_running": st.long_running, "global_cap": lanes.global_cap}

        deps = ConsoleDeps(store=store, settings=self._settings, base_url="",
                           readiness=health.readiness if health is not None else None,
                           lanes=lane_use if lanes is not None else None,
                           running=running_turns(self._host.connectors)
                           if isinstance(self._host, ShowsConnectors) else None)
        from bots.store import ConsoleSessions

        pruned = await ConsoleSessions(store=store).prune()
        if pruned:
            log.info("console.pruned", rows=pruned)
        runner = web.AppRunner(build_app(deps), access_log=None)
        await runner.setup()
        host, port = console_listen(self._settings.console.listen)
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        sockets = list(runner.addresses or [])
        self.port = int(sockets[0][1]) if sockets else port
        deps.base_url = self.url
        self._runner = runner
        log.info("console.started", url=self.url)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
