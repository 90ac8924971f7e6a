"""Dispatch of recorded events: a middleware chain, then a command or a turn.

Order (each step either calls ``next`` or ends the event with a recorded decision):

1. **dedupe** — claim the recorded event (``received`` -> ``processing``); a second claimer
   (replica, restart race) loses. Claiming first means every later decision is recorded
   exactly once. The layer's pump claims whole batches in one transaction
   (:meth:`~bots.store.InboundLog.claim_batch`); an event it hands over is claimed already.
2. **self-ignore** — the bot's own messages (and other bots unless the binding allows).
3. **binding** — exact channel match, else ignored (debug log).
4. **mention gate** — addressed = mention / reply to the bot / DM / command, or any message
   in a thread the bot is engaged in (follow-ups need no new mention).
5. **sender policy** — allow-list or approved pairing; an unknown sender gets one pairing
   code per hour, and the model is never called.
6. **route** — a command runs at once; a turn goes to the per-thread processor.

Per-thread ordering lives behind :class:`BaseEventProcessor` (like PTB's
``BaseUpdateProcessor``): turns of one thread run one after another in arrival order,
threads run concurrently up to a bound.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from bots._aio import reap
from bots.commands import parse_command
from bots.events import InboundEvent
from bots.store import StoredEvent, ThreadState
from geode.settings import BindingSettings

if TYPE_CHECKING:
    from bots.bindings import BindingTable
    from bots.senders import SenderPolicy
    from bots.store import InboundLog, ThreadSessions

__all__ = [
    "BaseEventProcessor",
    "Dispatch",
    "DispatchContext",
    "Dispatcher",
    "Middleware",
    "ThreadOrderedProcessor",
]

log = structlog.get_logger(__name__)

Job = Callable[[], Awaitable[None]]


@dataclass(kw_only=True)
class Dispatch:
    """What the chain learns about one event as it passes through."""

    stored: StoredEvent
    binding: BindingSettings | None = None
    thread: ThreadState | None = None
    command: str | None = None

    @property
    def event(self) -> InboundEvent:
        return self.stored.event


Next = Callable[[], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class DispatchContext:
    """What the middleware uses, and nothing else (Bolt hands its middleware the request,
    not the App): the records it reads, the policies it applies, the two decisions it can
    end an event with."""

    owner: str
    inbound: InboundLog
    bindings: BindingTable
    threads: ThreadSessions
    senders: SenderPolicy
    bot_user_id: Callable[[], str | None]
    bot_username: Callable[[], str | None]
    #: end the event unanswered, recording why
    ignore: Callable[[Dispatch, str], Awaitable[None]]
    #: end the event with the unknown sender's pairing code (at most one per hour)
    pairing_notice: Callable[[Dispatch], Awaitable[None]]


Middleware = Callable[[DispatchContext, Dispatch, Next], Awaitable[None]]


# -- processors ---------------------------------------------------------------------------------


class BaseEventProcessor(ABC):
    """Runs jobs keyed by thread: one at a time per key, in submission order."""

    @abstractmethod
    def submit(self, key: str, job: Job) -> None: ...

    @abstractmethod
    def pending(self, key: str) -> int:
        """Jobs of ``key`` waiting behind the running one."""

    @property
    @abstractmethod
    def busy(self) -> int:
        """Keys with a job running or waiting."""

    @abstractmethod
    def keys(self) -> list[str]:
        """The keys of :attr:`busy`."""

    @abstractmethod
    async def cancel(self, key: str) -> None:
        """Cancel the running job of ``key`` and drop its waiting ones."""

    @abstractmethod
    async def aclose(self) -> None:
        """Cancel everything (the daemon is stopping or the lease was lost)."""


class ThreadOrderedProcessor(BaseEventProcessor):
    """Per-key FIFO, keys in parallel, at most ``max_concurrent`` jobs running."""

    def __init__(self, *, max_concurrent: int = 64) -> None:
        self._queues: dict[str, deque[Job]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(max_concurrent)

    def submit(self, key: str, job: Job) -> None:
        self._queues.setdefault(key, deque()).append(job)
        if key not in self._workers:
            self._workers[key] = asyncio.create_task(self._work(key), name=f"thread:{key}")

    def pending(self, key: str) -> int:
        q = self._queues.get(key)
        return max(0, len(q) - 1) if q else 0

    @property
    def busy(self) -> int:
        return len(self._workers)

    def keys(self) -> list[str]:
        return list(self._workers)

    async def cancel(self, key: str) -> None:
        queue = self._queues.get(key)
        if queue is not None:
            queue.clear()
        await reap(self._workers.get(key))

    async def _work(self, key: str) -> None:
        queue = self._queues[key]
        try:
            while queue:
                job = queue[0]
                async with self._slots:
                    try:
                        await job()
                    except Exception:
                        # One failed job must not stall the thread. A job that failed on a
                        # lost database connection never gets here: the layer's job waits for
                        # the store and resumes its event (bots.router.Router.bind).
                        log.exception("processor.job_failed", thread=key)
                queue.popleft()
        finally:
            self._workers.pop(key, None)
            if not queue:
                self._queues.pop(key, None)

    async def aclose(self) -> None:
        for w in list(self._workers.values()):
            await reap(w)
        self._queues.clear()


# -- middleware -----------------------------------------------------------------------------------


async def dedupe(ctx: DispatchContext, d: Dispatch, nxt: Next) -> None:
    if d.stored.status == "received" and not await ctx.inbound.claim(d.stored.id,
                                                                        owner=ctx.owner):
        log.debug("dispatch.already_claimed", event_id=d.stored.id)
        return
    await nxt()


async def self_ignore(ctx: DispatchContext, d: Dispatch, nxt: Next) -> None:
    ev = d.event
    if ev.sender == ctx.bot_user_id():
        await ctx.ignore(d, "self")
        return
    await nxt()


async def binding(ctx: DispatchContext, d: Dispatch, nxt: Next) -> None:
    ev = d.event
    d.binding = await ctx.bindings.lookup(ev.platform, ev.workspace, ev.channel)
    if d.binding is None:
        await ctx.ignore(d, "unbound")
        return
    if ev.sender_is_bot and not d.binding.allow_bots:
        await ctx.ignore(d, "bot_sender")
        return
    await nxt()


async def mention_gate(ctx: DispatchContext, d: Dispatch, nxt: Next) -> None:
    ev = d.event
    assert d.binding is not None
    if ev.is_edit:
        await ctx.ignore(d, "edit")
        return
    d.command = parse_command(ev.text, ctx.bot_username())
    # A message that roots its own thread cannot be in an engaged one (no read hop for it);
    # route() engages the thread in the same transaction that accepts the turn.
    d.thread = None if ev.starts_thread else await ctx.threads.get(ev.thread_key)
    engaged = d.thread is not None and d.thread.engaged
    addressed = (
        ev.mentions_bot or ev.reply_to_bot or ev.is_dm or d.command is not None or engaged
        or not d.binding.require_mention
    )
    if not addressed:
        await ctx.ignore(d, "not_addressed")
        return
    await nxt()


async def sender_policy(ctx: DispatchContext, d: Dispatch, nxt: Next) -> None:
    assert d.binding is not None
    verdict = await ctx.senders.verdict(d.event, d.binding)
    if verdict == "allowed":
        await nxt()
        return
    if verdict == "bot":
        await ctx.ignore(d, "bot_sender")
        return
    await ctx.pairing_notice(d)


DEFAULT_CHAIN: tuple[Middleware, ...] = (dedupe, self_ignore, binding, mention_gate,
                                         sender_policy)


class Dispatcher:
    """Runs the middleware chain for each recorded event, then hands it to ``route``."""

    def __init__(
        self, *, ctx: DispatchContext, route: Callable[[Dispatch], Awaitable[None]],
        chain: Sequence[Middleware] = DEFAULT_CHAIN,
    ) -> None:
        self.ctx = ctx
        self.route = route
        self.chain = tuple(chain)

    async def dispatch(self, stored: StoredEvent) -> None:
        d = Dispatch(stored=stored)
        structlog.contextvars.bind_contextvars(
            platform=stored.event.platform, channel=stored.event.channel,
            thread=stored.event.thread_root,
        )
        try:
            await self._run(d, 0)
        finally:
            structlog.contextvars.unbind_contextvars("platform", "channel", "thread")

    async def _run(self, d: Dispatch, i: int) -> None:
        if i == len(self.chain):
            await self.route(d)
            return
        await self.chain[i](self.ctx, d, lambda: self._run(d, i + 1))
