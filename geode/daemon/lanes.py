"""LaneQueue: who may run a turn now.

Every request holds two lanes for its whole run:

* its **session lane** — one turn at a time per session (same key → serial, different keys
  → parallel);
* the **global lane** — bounded concurrency for the whole process (``global_cap``).

A request of a kind with a sub-limit (``channel``, ``cli``) also holds that kind's lane, so
channels cannot starve the terminal (or the other way round) while *every* kind still
shares the one global cap. (The original built a second lane queue for its gateway, so
channel turns never counted against the global cap; here there is one instance per
process, built by the daemon.)

Acquisition order is session → kind → global, released in reverse. The whole acquisition
waits at most ``wait_timeout_s``; then :class:`LaneBusy` says which lane was full. A lane is
released when the body raises or the task is cancelled: ``AsyncExitStack`` unwinds what
was taken, and ``asyncio.Semaphore`` hands a slot granted to a waiter that was cancelled
meanwhile to the next waiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from geode.errors import ConfigError, LaneBusy

if TYPE_CHECKING:
    from geode.settings import LaneSettings

__all__ = ["LaneBusy", "LaneKind", "LaneQueue", "LaneStats", "slots_released"]

LaneKind = Literal["cli", "channel", "scheduler"]

#: called after every acquisition attempt: (kind, seconds waited, "ok" | "busy")
WaitObserver = Callable[[str, float, str], None]


@dataclass(frozen=True)
class LaneStats:
    running: int  # global slots held now
    waiting: int  # requests waiting for any lane
    sessions: int  # session lanes currently tracked


@dataclass(eq=False)
class _Hold:
    """The kind and global slots one request holds now (the session lane is not here: a
    request never gives that up)."""

    queue: LaneQueue
    held: list[asyncio.Semaphore] = field(default_factory=list)
    running: bool = False

    def release_all(self) -> None:
        while self.held:
            self.held.pop().release()
        if self.running:
            self.running = False
            self.queue._running -= 1


_HOLD: ContextVar[_Hold | None] = ContextVar("geode_lane_hold", default=None)


@contextlib.asynccontextmanager
async def slots_released() -> AsyncIterator[None]:
    """Give this request's global (and kind) slots back while the body waits for a person
    (an approval in the thread), and take them again after; its session lane stays held, so
    the session's queue still waits. Outside a lane it does nothing.

    Taking them again waits as long as it must (the turn is already under way). Cancelled
    while it waits, the request holds only what it got back, and releases only that.
    """
    hold = _HOLD.get()
    if hold is None or not hold.held:
        yield
        return
    slots = list(hold.held)
    hold.release_all()
    try:
        yield
    finally:
        for sem in slots:
            await sem.acquire()
            hold.held.append(sem)
        hold.running = True
        hold.queue._running += 1


class _SessionLane:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0  # holders + waiters; the entry is dropped when it reaches 0


class LaneQueue:
    """Session lanes + one bounded global lane with per-kind sub-limits sharing it.

    Args:
        global_cap: turns that may run at once in this process, all kinds together.
        caps: per-kind sub-limits (e.g. ``{"channel": 6, "cli": 4}``); a kind not listed
            is bounded by the global cap only. Each must be ≤ ``global_cap``.
        wait_timeout_s: how long one request may wait for all its lanes together.
        on_wait: observer of every acquisition (metrics); must be quick, never raises out.
    """

    def __init__(
        self,
        *,
        global_cap: int,
        caps: Mapping[str, int] | None = None,
        wait_timeout_s: float = 300.0,
        on_wait: WaitObserver | None = None,
    ) -> None:
        if global_cap < 1:
            raise ConfigError(f"[lanes] global_cap must be at least 1 (got {global_cap}).")
        caps = dict(caps or {})
        for kind, cap in caps.items():
            # Invariant: a sub-limit above the global cap could never be reached and
            # hides a configuration mistake.
            if not 1 <= cap <= global_cap:
                raise ConfigError(
                    f"[lanes] {kind}_cap = {cap} must be between 1 and global_cap = {global_cap}."
                )
        self.global_cap = global_cap
        self.caps = caps
        self.wait_timeout_s = wait_timeout_s
        self.on_wait = on_wait
        self._global = asyncio.Semaphore(global_cap)
        self._kinds = {kind: asyncio.Semaphore(cap) for kind, cap in caps.items()}
        self._sessions: dict[str, _SessionLane] = {}
        self._running = 0
        self._waiting = 0

    @classmethod
    def from_settings(
        cls, lanes: LaneSettings, *, on_wait: WaitObserver | None = None
    ) -> LaneQueue:
        return cls(
            global_cap=lanes.global_cap,
            caps={"channel": lanes.channel_cap, "cli": lanes.cli_cap},
            wait_timeout_s=lanes.wait_timeout_s,
            on_wait=on_wait,
        )

    @property
    def stats(self) -> LaneStats:
        return LaneStats(running=self._running, waiting=self._waiting,
                         sessions=len(self._sessions))

    def session_busy(self, session_id: str) -> bool:
        """Whether a turn of ``session_id`` holds its lane now."""
        lane = self._sessions.get(session_id)
        return lane is not None and lane.lock.locked()

    @contextlib.asynccontextmanager
    async def acquire(
        self, session_id: str, *, kind: LaneKind = "cli", timeout_s: float | None = None
    ) -> AsyncIterator[None]:
        """Hold the session lane, the kind's lane (if limited) and the global lane.

        Raises:
            LaneBusy: the lanes were not all free within the wait bound.
        """
        bound = self.wait_timeout_s if timeout_s is None else timeout_s
        started = time.monotonic()
        lane = self._sessions.get(session_id)
        if lane is None:
            lane = self._sessions[session_id] = _SessionLane()
        lane.users += 1
        hold = _Hold(self)
        try:
            async with contextlib.AsyncExitStack() as stack:
                current = "session"
                self._waiting += 1
                try:
                    async with asyncio.timeout(bound):
                        await stack.enter_async_context(lane.lock)
                        sub = self._kinds.get(kind)
                        if sub is not None:
                            current = kind
                            await sub.acquire()
                            hold.held.append(sub)
                        current = "global"
                        await self._global.acquire()
                        hold.held.append(self._global)
                except TimeoutError:
                    hold.release_all()
                    waited = time.monotonic() - started
                    self._notify(kind, waited, "busy")
                    raise LaneBusy(lane=current, kind=kind, waited_s=waited) from None
                except BaseException:
                    hold.release_all()
                    raise
                finally:
                    self._waiting -= 1
                self._notify(kind, time.monotonic() - started, "ok")
                self._running += 1
                hold.running = True
                token = _HOLD.set(hold)
                try:
                    yield
                finally:
                    _HOLD.reset(token)
                    hold.release_all()
        finally:
            lane.users -= 1
            if lane.users == 0 and self._sessions.get(session_id) is lane:
                del self._sessions[session_id]

    def _notify(self, kind: str, waited: float, outcome: str) -> None:
        if self.on_wait is None:
            return
        with contextlib.suppress(Exception):  # metrics never break a request
            self.on_wait(kind, waited, outcome)
