"""The plumbing every platform fake shares, so each keeps only its platform's semantics.

A fake declares its API as a route table: each handler is marked with :func:`route` (the
API method's name, and for REST-style APIs the HTTP verb and path it is served at). The
base collects the table when the class is made, mounts the path routes on the fake's
``web.Application`` (:meth:`Routes.mount`), looks up a method-style handler by name
(:meth:`Routes.handler_for`), and keeps the injected failures (:class:`Fault`, taken by
:meth:`Routes.take_fault`). What a fake still writes itself is what differs per platform:
how a request names its method and carries its payload, how an error looks on the wire,
and what each handler does.

::

    class FakeChat(RoutedFake):
        @route("sendMessage")
        async def _send_message(self, params: JSONDict) -> JSONDict: ...

        @route("GET /channels/{cid}", verb="GET", path="/api/channels/{cid}")
        async def _get_channel(self, request: web.Request) -> web.Response: ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from aiohttp import web

from geode.testing._fakebase import LoopbackFake

__all__ = ["Fault", "Route", "RoutedFake", "Routes", "route"]

F = TypeVar("F", bound=Callable[..., Any])

_MARK = "__fake_routes__"


@dataclass(frozen=True)
class Route:
    """One endpoint of a fake's API.

    Attributes:
        name: the API's name for it (Telegram / Slack: the method, e.g. ``sendMessage``;
            REST: ``"VERB /path"``), what failures and recorded calls are matched on.
        handler: the fake's attribute that serves it.
        verb: the HTTP verb for a path route.
        path: the aiohttp path it is mounted at; None: served through the fake's own
            method dispatcher (:meth:`Routes.handler_for`).
    """

    name: str
    handler: str
    verb: str = "*"
    path: str | None = None


def route(name: str, *, verb: str = "*", path: str | None = None) -> Callable[[F], F]:
    """Mark a handler as serving ``name`` (at ``verb path`` for a REST route); stack it for
    aliases or several paths. Returns the function unchanged."""

    def mark(fn: F) -> F:
        marks: list[tuple[str, str, str | None]] = list(getattr(fn, _MARK, ()))
        marks.append((name, verb, path))
        setattr(fn, _MARK, marks)
        return fn

    return mark


@dataclass(kw_only=True)
class Fault:
    """An injected failure: the next ``times`` calls of ``method`` (for which ``when``
    holds, given the call's parameters) answer the platform's error for ``status``.

    ``apply_effect``: the call takes effect, then the error is answered (the client cannot
    know the outcome). ``detail``: the platform's own fields (an error name, a retry delay,
    a description, ...), read by the fake that renders the error.
    """

    method: str
    status: int
    times: int = 1
    apply_effect: bool = False
    retry_after: float | None = None
    when: Callable[[Mapping[str, Any]], bool] | None = None
    #: True: ``method`` is a substring of the call's name (REST: ``"PATCH /channels/"``)
    partial: bool = False
    detail: dict[str, Any] = field(default_factory=dict)


class Routes:
    """The route table and injected failures of a fake (see the module docstring)."""

    #: the class's declared routes, by name (normalised by :meth:`route_key`)
    routes: ClassVar[dict[str, Route]] = {}

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        table: dict[str, Route] = {}
        for klass in reversed(cls.__mro__):
            for attr, fn in vars(klass).items():
                for name, verb, path in getattr(fn, _MARK, ()):
                    r = Route(name=name, handler=attr, verb=verb, path=path)
                    table[cls.route_key(name) if path is None else f"{verb} {path}"] = r
        cls.routes = table

    def __init__(self) -> None:
        self.faults: list[Fault] = []

    @classmethod
    def route_key(cls, name: str) -> str:
        """How a method-style name is looked up (Telegram: case-insensitive)."""
        return name

    def path_routes(self) -> Iterator[Route]:
        return (r for r in self.routes.values() if r.path is not None)

    def mount(self, app: web.Application, *, prefix: str = "") -> None:
        """Add every path route to ``app`` (``prefix`` before each path)."""
        for r in self.path_routes():
            app.router.add_route(r.verb, prefix + (r.path or ""), getattr(self, r.handler))

    def handler_for(self, name: str) -> Callable[..., Any] | None:
        """The bound handler of a method-style route, or None (an unknown method)."""
        r = self.routes.get(self.route_key(name))
        if r is None or r.path is not None:
            return None
        handler: Callable[..., Any] = getattr(self, r.handler)
        return handler

    def inject(self, fault: Fault) -> None:
        """Fail the next matching calls (see :class:`Fault`)."""
        self.faults.append(fault)

    def take_fault(self, name: str, params: Mapping[str, Any] | None = None) -> Fault | None:
        """The first injected failure for this call, counted down (gone when used up)."""
        key = self.route_key(name)
        for fault in self.faults:
            if fault.times <= 0:
                continue
            hit = key.find(fault.method) >= 0 if fault.partial \
                else self.route_key(fault.method) == key
            if not hit or (fault.when is not None and not fault.when(params or {})):
                continue
            fault.times -= 1
            if fault.times <= 0:
                self.faults.remove(fault)
            return fault
        return None


class RoutedFake(Routes, LoopbackFake):
    """A loopback fake (:class:`~geode.testing._fakebase.LoopbackFake`) with a route table."""

    #: the largest request body the fake reads (uploads; aiohttp's default is 1 MiB)
    client_max_size = 64 << 20

    def __init__(self) -> None:
        LoopbackFake.__init__(self)
        Routes.__init__(self)

    async def _serve_routes(self) -> None:
        """Serve the path routes on a loopback port (what ``start`` does)."""
        app = web.Application(client_max_size=self.client_max_size)
        self.mount(app)
        await self._serve(app)
