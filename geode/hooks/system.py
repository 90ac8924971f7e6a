"""Observation hooks: lifecycle events for metrics, logs and dashboards. They decide nothing.

A typed observer (:meth:`HookSystem.subscribe_loop`) gets ``(session_id, event)`` for the
loop's events (its stream and the observer-only model call events), frozen dataclasses it
``match``es on; :meth:`HookSystem.publish` hands any other typed event (the executor's and the
spend control's, :mod:`geode.hooks.events`; another package's, e.g. the chat layer's) to
:meth:`HookSystem.subscribe_events` observers. A name-based observer (shell hooks, user
plugins) sees every one of them too, as ``(event.kind, data)`` (``session_id`` first for loop
events) with a read-only copy of the data, so it cannot change what the harness does or
sees. Observers' exceptions are logged and dropped. Delivery is synchronous (the loop calls
it without awaiting); what an observer returns to await is scheduled as a task and
:meth:`HookSystem.drain` waits for them (shutdown, tests).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias

import structlog

if TYPE_CHECKING:
    from geode.hooks.events import ObservedEvent
    from geode.loop.events import ObservedLoopEvent

__all__ = ["EventObserverFn", "HookSystem", "LoopObserverFn", "ObserverFn"]

log = structlog.get_logger(__name__)

ObserverFn: TypeAlias = Callable[[str, Mapping[str, Any]], Awaitable[object] | None]
#: a typed observer of one session's loop events: ``(session_id, event)``
LoopObserverFn: TypeAlias = Callable[[str, "ObservedLoopEvent"], Awaitable[object] | None]
#: a typed observer of the published events (the executor's and the spend control's,
#: ``geode.hooks.events``, and another package's: any typed event)
EventObserverFn: TypeAlias = Callable[["ObservedEvent"], Awaitable[object] | None]


class HookSystem:
    """A fan-out of lifecycle events to observers. Implements the loop's ``Observer``."""

    def __init__(self) -> None:
        self._observers: list[tuple[ObserverFn, re.Pattern[str] | None]] = []
        #: each with the event types it takes (None: every one)
        self._loop_observers: list[tuple[LoopObserverFn, tuple[type, ...] | None]] = []
        self._event_observers: list[tuple[EventObserverFn, tuple[type, ...] | None]] = []
        self._pending: set[asyncio.Future[Any]] = set()

    def subscribe(self, fn: ObserverFn, *, events: str | None = None) -> ObserverFn:
        """Add an observer; ``events`` is a regex on the event name (e.g. ``"tool\\..*"``).

        Sync observers run inline and must be quick; do I/O in an async observer.
        """
        self._observers.append((fn, re.compile(events) if events else None))
        return fn

    def subscribe_loop(self, fn: LoopObserverFn, *,
                       only: tuple[type, ...] | None = None) -> LoopObserverFn:
        """Add a typed observer of the loop's events (sync and quick, or async: then it runs
        as a task, like a named one; its failures are logged). ``only``: the event types
        it takes (the others are not delivered to it: a turn emits a dozen)."""
        self._loop_observers.append((fn, only))
        return fn

    def subscribe_events(self, fn: EventObserverFn, *,
                         only: tuple[type, ...] | None = None) -> EventObserverFn:
        """Add a typed observer of the published events (the executor's, the spend
        control's, another package's): sync and quick, or async as :meth:`subscribe_loop`;
        ``only`` as there."""
        self._event_observers.append((fn, only))
        return fn

    def unsubscribe(self, fn: ObserverFn) -> None:
        self._observers = [(f, m) for f, m in self._observers if f is not fn]

    def loop_event(self, session_id: str, event: ObservedLoopEvent, /) -> None:
        """Deliver a loop event to the typed observers, then by name to the others."""
        for fn, only in list(self._loop_observers):
            if only is None or isinstance(event, only):
                self._call(fn, event.kind, partial(fn, session_id, event))
        if self._observers:
            self.emit(event.kind, session_id=session_id, **event.data)

    def publish(self, event: ObservedEvent, /) -> None:
        """Deliver a typed event to the typed observers, then by name to the others."""
        for fn, only in list(self._event_observers):
            if only is None or isinstance(event, only):
                self._call(fn, event.kind, partial(fn, event))
        if self._observers:
            self.emit(event.kind, **event.data)

    def emit(self, event: str, /, **data: Any) -> None:
        """Deliver ``event`` to every matching observer; never raises."""
        for fn, matcher in list(self._observers):
            if matcher is not None and matcher.fullmatch(event) is None:
                continue
            self._call(fn, event, partial(_observe_copy, fn, event, data))

    def _call(self, fn: object, event: str, call: Callable[[], object]) -> None:
        """Run one observer (``call``); an awaitable it returns becomes a task :meth:`drain`
        waits for (a future, e.g. an executor's, is waited for as it is: no task around it).
        Whatever fails is logged and dropped: observation never breaks a run."""
        try:
            result = call()
            if result is None:
                return
            if isinstance(result, asyncio.Future):
                self._pending.add(result)
                result.add_done_callback(partial(self._settled, fn, event))
            elif inspect.isawaitable(result):
                try:
                    asyncio.get_running_loop()
                except RuntimeError:
                    if inspect.iscoroutine(result):
                        result.close()  # no loop to run it on; drop it cleanly
                    raise
                task = asyncio.ensure_future(self._guard(fn, event, result))
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)
        except Exception:
            log.warning("observer failed", observer=_name(fn), hook_event=event, exc_info=True)

    def _settled(self, fn: object, event: str, fut: asyncio.Future[Any]) -> None:
        self._pending.discard(fut)
        if not fut.cancelled() and (exc := fut.exception()) is not None:
            log.warning("observer failed", observer=_name(fn), hook_event=event, exc_info=exc)

    async def _guard(self, fn: object, event: str, result: Awaitable[object]) -> None:
        try:
            await result
        except Exception:  # observation must never break a run
            log.warning("observer failed", observer=_name(fn), hook_event=event, exc_info=True)

    async def drain(self) -> None:
        """Wait until every async observer scheduled so far has finished."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)


_SCALARS = (str, int, float, bool, type(None))


def _observe_copy(fn: ObserverFn, event: str, data: dict[str, Any]) -> Awaitable[object] | None:
    return fn(event, _read_only_copy(data))  # each observer its own copy


def _read_only_copy(data: dict[str, Any]) -> Mapping[str, Any]:
    """A read-only copy of ``data`` no observer can change for another one.

    Most events carry scalars only: a shallow copy isolates those, at a fraction of the cost
    of ``deepcopy`` (which every observer of every loop event paid).
    """
    if all(type(v) in _SCALARS for v in data.values()):
        return MappingProxyType(dict(data))
    return MappingProxyType(copy.deepcopy(data))


def _name(fn: object) -> str:
    return str(getattr(fn, "__qualname__", None) or repr(fn))
