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
waits at most ``wait_timeout_s``; then :class:`LaneBusy` says which lane was full. A caller
that keeps its request durably queued elsewhere (a channel turn: its pending outbox row)
passes ``wait=False`` to wait as long as it takes, and ``on_queued`` to learn how many
requests are waiting ahead of it whenever that changes (waiters are served in arrival order:
``asyncio.Semaphore`` and ``asyncio.Lock`` are FIFO). A lane is released when the body
raises or the task is cancelled, and ``asyncio.Semaphore`` hands a slot granted to a waiter
that was cancelled meanwhile to the next waiter.

**The long lane.** A turn still running ``long_after_s`` after it started moves to a
separate lane of ``long_cap`` slots: once it holds one, it gives its kind and global slots
back, so quick requests keep being served while long ones run (at most ``long_cap`` of
them; a turn that finds the long lane full stays where it is until a slot frees).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import inspect
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from geode.errors import ConfigError, LaneBusy
from geode.executor._human_wait import lend_while_waiting, reset_lender

if TYPE_CHECKING:
    from geode.settings import LaneSettings

__all__ = ["LaneBusy", "LaneKind", "LaneQueue", "LaneStats", "QueueObserver", "slots_released"]

LaneKind = Literal["cli", "channel", "scheduler"]

#: called after every acquisition attempt: (kind, seconds waited, "ok" | "busy")
WaitObserver = Callable[[str, float, str], None]

#: told how many requests wait ahead of this one, each time that changes (0: next)
QueueObserver = Callable[[int], "Awaitable[None] | None"]


@dataclass(frozen=True)
class LaneStats:
    running: int  # global slots held now
    waiting: int  # requests waiting for any lane
    sessions: int  # session lanes currently tracked
    long_running: int = 0  # turns moved to the long lane


class _Ticket:
    """One waiting request: its place in the arrival order and who to tell it moved."""

    __slots__ = ("ahead", "key", "kind", "observer")

    def __init__(self, kind: str, key: tuple[int, int], observer: QueueObserver | None) -> None:
        self.kind = kind
        self.key = key
        self.observer = observer
        self.ahead = -1


_SEQ = itertools.count()


class _OrderedSlots:
    """A semaphore whose waiters are served by an order key (a channel message's durable
    arrival id), arrival order among equal keys; without a key, by arrival."""

    def __init__(self, cap: int) -> None:
        self._free = cap
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []

    def locked(self) -> bool:
        return self._free == 0 or any(not f.done() for _k, _s, f in self._waiters)

    async def acquire(self, key: int | None = None, seq: int | None = None) -> None:
        if seq is None:
            seq = next(_SEQ)
        if key is None:
            key = seq
        if not self.locked():
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (key, seq, fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # granted, then cancelled before use: the next one gets it
            raise

    def release(self) -> None:
        self._free += 1
        while self._free > 0 and self._waiters:
            _k, _s, fut = heapq.heappop(self._waiters)
            if fut.done():
                continue  # a cancelled waiter
            self._free -= 1
            fut.set_result(None)


@dataclass(eq=False)
class _Hold:
    """The kind and global slots one request holds now (the session lane is not here: a
    request never gives that up), and whether it moved to the long lane."""

    queue: LaneQueue
    held: list[asyncio.Semaphore | _OrderedSlots] = field(default_factory=list)
    running: bool = False
    in_long: bool = False

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
    while it waits, the request holds only what it got back, and releases only that. A
    turn that moved to the long lane meanwhile takes nothing back (it runs there).
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
        if not hold.in_long:
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
        long_after_s: seconds after which a running turn moves to the long lane (None:
            never).
        long_cap: slots of the long lane.
        on_wait: observer of every acquisition (metrics); must be quick, never raises out.
    """

    def __init__(
        self,
        *,
        global_cap: int,
        caps: Mapping[str, int] | None = None,
        wait_timeout_s: float = 300.0,
        long_after_s: float | None = None,
        long_cap: int = 4,
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
        if long_cap < 1:
            raise ConfigError(f"[lanes] long_cap must be at least 1 (got {long_cap}).")
        if long_after_s is not None and long_after_s <= 0:
            raise ConfigError(f"[lanes] long_after_s must be positive (got {long_after_s}).")
        self.global_cap = global_cap
        self.caps = caps
        self.wait_timeout_s = wait_timeout_s
        self.long_after_s = long_after_s
        self.long_cap = long_cap
        self.on_wait = on_wait
        self._global = asyncio.Semaphore(global_cap)
        self._kinds = {kind: _OrderedSlots(cap) for kind, cap in caps.items()}
        self._long = asyncio.Semaphore(long_cap)
        self._sessions: dict[str, _SessionLane] = {}
        self._running = 0
        self._waiting = 0
        self._long_running = 0
        #: waiting requests in arrival order (for "N ahead")
        self._queue: list[_Ticket] = []
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def from_settings(
        cls, lanes: LaneSettings, *, on_wait: WaitObserver | None = None
    ) -> LaneQueue:
        return cls(
            global_cap=lanes.global_cap,
            caps={"channel": lanes.channel_cap, "cli": lanes.cli_cap},
            wait_timeout_s=lanes.wait_timeout_s,
            long_after_s=lanes.long_after_s,
            long_cap=lanes.long_cap,
            on_wait=on_wait,
        )

    @property
    def stats(self) -> LaneStats:
        return LaneStats(running=self._running, waiting=self._waiting,
                         sessions=len(self._sessions), long_running=self._long_running)

    def session_busy(self, session_id: str) -> bool:
        """Whether a turn of ``session_id`` holds its lane now."""
        lane = self._sessions.get(session_id)
        return lane is not None and lane.lock.locked()

    @contextlib.asynccontextmanager
    async def acquire(
        self, session_id: str, *, kind: LaneKind = "cli", timeout_s: float | None = None,
        wait: bool = True, on_queued: QueueObserver | None = None, order: int | None = None,
    ) -> AsyncIterator[None]:
        """Hold the session lane, the kind's lane (if limited) and the global lane (or, after
        ``long_after_s``, the long lane instead of the last two).

        Args:
            timeout_s: the wait bound instead of ``wait_timeout_s``.
            wait: False: no wait bound (the request is queued durably by its caller).
            on_queued: told the number of requests ahead whenever it changes while waiting
                (only if it has to wait).
            order: the request's place among waiters of its kind (a durable arrival id:
                a message recovered after a restart keeps its place); default: arrival.

        Raises:
            LaneBusy: the lanes were not all free within the wait bound.
        """
        bound: float | None = (self.wait_timeout_s if timeout_s is None else timeout_s) \
            if wait else None
        started = time.monotonic()
        lane = self._sessions.get(session_id)
        if lane is None:
            lane = self._sessions[session_id] = _SessionLane()
        lane.users += 1
        sub = self._kinds.get(kind)
        held_session = False
        hold = _Hold(self)
        seq = next(_SEQ)
        key = order if order is not None else seq
        free = not lane.lock.locked() and not (sub is not None and sub.locked()) \
            and not self._global.locked()
        # a request that gets its lanes at once (no await below) is never "queued"
        ticket = _Ticket(kind, (key, seq), None if free else on_queued)
        try:
            current = "session"
            self._waiting += 1
            self._queue.append(ticket)
            self._reposition()
            try:
                async with asyncio.timeout(bound):
                    await lane.lock.acquire()
                    held_session = True
                    if sub is not None:
                        current = kind
                        await sub.acquire(key, seq)
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
                self._queue.remove(ticket)
                self._reposition()
            self._notify(kind, time.monotonic() - started, "ok")
            self._running += 1
            hold.running = True

            async def move_to_long_lane() -> None:
                await self._long.acquire()
                # no await from here on: a cancellation cannot split the move
                hold.in_long = True
                self._long_running += 1
                hold.release_all()  # its kind and global slots (unless lent out meanwhile)

            movers: list[asyncio.Task[None]] = []

            def start_mover() -> None:
                movers.append(asyncio.create_task(move_to_long_lane(),
                                                  name=f"long-lane:{session_id}"))

            # A timer, not a task sleeping from the start: most turns end before it fires.
            timer = (asyncio.get_running_loop().call_later(self.long_after_s, start_mover)
                     if self.long_after_s is not None else None)
            token = _HOLD.set(hold)
            # the executor's approval step lends these slots out while a person answers
            lending = lend_while_waiting(slots_released)
            try:
                yield
            finally:
                reset_lender(lending)
                _HOLD.reset(token)
                if timer is not None:
                    timer.cancel()
                for mover in movers:
                    mover.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await mover
                if hold.in_long:
                    self._long_running -= 1
                    self._long.release()
                hold.release_all()
        finally:
            if held_session:
                lane.lock.release()
            lane.users -= 1
            if lane.users == 0 and self._sessions.get(session_id) is lane:
                del self._sessions[session_id]

    def _reposition(self) -> None:
        """Tell each waiter whose place changed how many of its kind wait ahead of it now
        (its kind's lane is the one it queues for; other kinds share only the global cap)."""
        seen: dict[str, int] = {}
        for t in sorted(self._queue, key=lambda t: t.key):
            i = seen.get(t.kind, 0)
            seen[t.kind] = i + 1
            if t.ahead == i:
                continue
            t.ahead = i
            if t.observer is None:
                continue
            try:
                res = t.observer(i)
            except Exception:  # an observer never breaks a request
                continue
            if inspect.isawaitable(res):
                task = asyncio.ensure_future(res)
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    def _notify(self, kind: str, waited: float, outcome: str) -> None:
        if self.on_wait is None:
            return
        with contextlib.suppress(Exception):  # metrics never break a request
            self.on_wait(kind, waited, outcome)
