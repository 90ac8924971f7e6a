"""Routing: what a recorded event becomes, in one place.

The pump (:mod:`bots.intake`) hands each claimed event to :meth:`Router.dispatch`, which
runs a middleware chain (each step either calls ``next`` or ends the event with a recorded
decision), then routes what passed:

1. **dedupe** — claim the recorded event (``received`` -> ``processing``); a second claimer
   (replica, restart race) loses. Claiming first means every later decision is recorded
   exactly once. The pump claims whole batches in one transaction
   (:meth:`~bots.store.InboundLog.claim_batch`); an event it hands over is claimed already.
2. **self-ignore** — the bot's own messages (and other bots unless the binding allows).
3. **binding** — exact channel match, else ignored (debug log).
4. **mention gate** — addressed = mention / reply to the bot / DM / command, or any message
   in a thread the bot is engaged in (follow-ups need no new mention).
5. **sender policy** (:class:`SenderPolicy`) — allow-list or approved pairing; an unknown
   sender gets one pairing code per hour, and the model is never called.
6. **route** — a command runs at once; a turn is accepted and goes to the per-thread
   processor.

Per-thread ordering lives behind :class:`BaseEventProcessor` (like PTB's
``BaseUpdateProcessor``): turns of one thread run one after another in arrival order,
threads run concurrently up to a bound. Each processor job is wrapped by
:meth:`Router.bind`, which keeps its event live (recovery never starts it twice) and resumes
it in place after a store outage.

The chain, the processor, the sender policy and the decisions are this one module: an event
passes through them without leaving it, and nothing here calls back into the layer. What
they use (the records, the bindings, the turn runner, the bot's identity) is handed to the
:class:`Router` as values. Part of :class:`~bots.layer.ChannelLayer`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import structlog

from bots._aio import reap
from bots.bindings import BindingTable
from bots.commands import ActiveTurn, CommandContext, PrivateReply, parse_command, run_command
from bots.events import InboundEvent
from bots.port import ApprovalControls, PlatformClient
from bots.store import (
    ChannelStore,
    InboundLog,
    OutboxRow,
    StoredEvent,
    ThreadSessions,
    ThreadState,
    Tx,
)
from bots.store import ThreadLeaseLost as StoreLeaseLost
from bots.store.pairing import PairingStore
from bots.turn import Deliverer, EntryOrder, TurnRunner
from geode.errors import ShuttingDown
from geode.secret_redaction import redact_text
from geode.settings import BindingSettings
from geode.store._retry import is_transient, log_store_failure, retry_transient

__all__ = [
    "BaseEventProcessor",
    "BotIdentity",
    "Dispatch",
    "DispatchContext",
    "Middleware",
    "Router",
    "RouterSignals",
    "SenderPolicy",
    "SenderVerdict",
    "ThreadOrderedProcessor",
    "with_dm_command",
]

log = structlog.get_logger(__name__)

Job = Callable[[], Awaitable[None]]
Next = Callable[[], Awaitable[None]]
SenderVerdict = Literal["allowed", "unknown", "bot"]


# -- what the chain knows ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BotIdentity:
    """Who the bot is on its platform, learned when the connector logs in (before the
    layer processes): its user id (self-ignore) and handle (``/cmd@handle``)."""

    user_id: str | None = None
    username: str | None = None


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
    identity: BotIdentity
    #: end the event unanswered, recording why
    ignore: Callable[[Dispatch, str], Awaitable[None]]
    #: end the event with the unknown sender's pairing code (at most one per hour)
    pairing_notice: Callable[[Dispatch], Awaitable[None]]


Middleware = Callable[[DispatchContext, Dispatch, Next], Awaitable[None]]


# -- the sender policy ----------------------------------------------------------------------------


class SenderPolicy:
    """Default deny: allow-list per binding, pairing codes for everyone else.

    An unknown sender who addresses the bot gets one pairing code per hour (never more: a
    flood of messages must not become a flood of replies), and the platform as a whole gets
    at most ``max_new_per_hour`` new codes (``bots.store.pairing``). ``geode pairing approve
    CODE`` allows the sender on that platform for good.
    """

    def __init__(self, *, pairing: PairingStore) -> None:
        self.pairing = pairing

    async def verdict(self, event: InboundEvent, binding: BindingSettings) -> SenderVerdict:
        if event.sender_is_bot and not binding.allow_bots:
            return "bot"
        if event.sender in binding.allow_users:
            return "allowed"
        if await self.pairing.is_approved(event.platform, event.sender):
            return "allowed"
        return "unknown"

    async def pairing_text(
        self, event: InboundEvent, *, conn: Tx | None = None
    ) -> str | None:
        """The one pairing message for an unknown sender, or None (already sent / capped, or
        a message sent as a chat, which names no person to pair)."""
        if event.extra.get("sender_chat"):
            return None
        code = await self.pairing.issue(
            platform=event.platform, sender=event.sender, sender_name=event.sender_name,
            channel=event.channel, conn=conn,
        )
        if code is None:
            return None
        return (
            f"I don't know you yet. Pairing code: {code}\n"
            f"Ask the operator to run: geode pairing approve {code}\n"
            "(valid for one hour)"
        )


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
                        # lost database connection never gets here: the router's job waits
                        # for the store and resumes its event (Router.bind).
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
    if ev.sender == ctx.identity.user_id:
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
    # only a text that starts with "/" can be a command: the parser reads no other
    d.command = (parse_command(ev.text, ctx.identity.username)
                 if ev.text.lstrip().startswith("/") else None)
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

#: a direct-message command's test (the message's text, the bot's username)
DmMatch = Callable[[str, "str | None"], bool]
#: what answers it (the event is ended there)
DmAnswer = Callable[[DispatchContext, Dispatch], Awaitable[None]]


def with_dm_command(chain: Sequence[Middleware], matches: DmMatch, answer: DmAnswer, *,
                    before: Middleware) -> tuple[Middleware, ...]:
    """``chain`` with a gate placed before ``before`` (the binding check: a direct message is
    usually not a bound channel) that hands a direct message ``matches`` accepts to
    ``answer``; every other event goes on down the chain without leaving this module (the
    command's own module is entered only for its own messages)."""

    async def dm_command(ctx: DispatchContext, d: Dispatch, nxt: Next) -> None:
        ev = d.event
        if (not ev.is_dm or ev.is_edit or ev.sender_is_bot
                or not matches(ev.text, ctx.identity.username)):
            await nxt()
            return
        await answer(ctx, d)

    at = list(chain).index(before) if before in chain else 0
    return (*chain[:at], dm_command, *chain[at:])


# -- the router -----------------------------------------------------------------------------------


class RouterSignals(Protocol):
    """What the router shares with the pump and the lease keeper about claiming
    (:class:`bots.intake.ClaimState`): a finished job wakes a claim deferred at capacity; a
    store failure marks an outage to recover from."""

    deferred: bool
    outage: bool

    def poke(self) -> None:
        """Wake the pump to claim."""


class Router:
    """Runs the chain for each recorded event and decides what it becomes; see the module
    docstring."""

    #: resumes of one job after store failures before its turn is ended with a message (a
    #: store that answers a probe but fails the turn's writes every time)
    MAX_RESUMES = 8

    def __init__(
        self,
        *,
        signals: RouterSignals,
        client: PlatformClient,
        records: ChannelStore,
        bindings: BindingTable,
        processor: BaseEventProcessor,
        deliverer: Deliverer,
        turns: TurnRunner,
        commands: CommandContext,
        active: dict[str, ActiveTurn],
        entry: EntryOrder,
        fault: Callable[[str], None] | None = None,
        chain: Sequence[Middleware] = DEFAULT_CHAIN,
    ) -> None:
        self.signals = signals
        self.client = client
        self.records = records
        self.inbound = records.inbound
        self.outbox = records.outbox
        self.thread_leases = records.thread_leases
        self.bindings = bindings
        self.senders = SenderPolicy(pairing=records.pairing)
        self.processor = processor
        self.deliverer = deliverer
        self.turns = turns
        self.commands = commands
        self.active = active
        self.entry = entry
        #: test seam: called with a point name; a test raises there to simulate a crash
        self.fault = fault
        self.chain = tuple(chain)
        self.ctx = DispatchContext(
            owner=records.owner, inbound=records.inbound, bindings=bindings,
            threads=records.threads, senders=self.senders, identity=BotIdentity(),
            ignore=self.ignore, pairing_notice=self.pairing_notice)
        #: commands, notices and recoveries running outside the processor
        self.tasks: set[asyncio.Task[Any]] = set()
        #: events with a live job here (a turn submitted to the processor, a command
        #: running): recovery never starts them a second time
        self.live: set[int] = set()

    def identify(self, identity: BotIdentity) -> None:
        """The bot's identity, once the connector has logged in (before anything is
        dispatched): the chain reads it as a value, never asks the platform per event."""
        self.ctx = dataclasses.replace(self.ctx, identity=identity)

    def spawn(self, coro: Any) -> None:
        self.track(asyncio.create_task(coro))

    def track(self, task: asyncio.Task[Any]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _fault(self, point: str) -> None:
        if self.fault is not None:
            self.fault(point)

    # -- the chain ----------------------------------------------------------------------------

    async def dispatch(self, stored: StoredEvent) -> None:
        """Run the middleware chain for one recorded event, then :meth:`route` it."""
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

    # -- decisions (the chain's ends) -----------------------------------------------------------

    async def ignore(self, d: Dispatch, decision: str) -> None:
        log.debug("channel.ignored", decision=decision, event_id=d.stored.id)
        await self.inbound.set_status(d.stored.id, "ignored", decision=decision)

    async def notice(
        self, d: Dispatch, text: str, *, decision: str, conn: Tx | None = None
    ) -> bool:
        """Queue a short answer in the event's thread (finishing the event) and send it."""
        ev = d.event
        queued = await self.outbox.add_notice(
            session_key=ev.thread_key, turn_key=f"ev{d.stored.id}", event_id=d.stored.id,
            platform=ev.platform, workspace=ev.workspace, target=ev.target(),
            chunks=self.client.render(redact_text(text)),
            decision=decision, conn=conn,
        )
        if queued and conn is None:
            await self._send_notice(ev.thread_key, f"ev{d.stored.id}")
        return queued

    async def _send_notice(self, session_key: str, turn_key: str) -> None:
        row = await self.outbox.get(session_key, turn_key)
        if row is not None:
            await self.deliverer.deliver(row)

    async def pairing_notice(self, d: Dispatch) -> None:
        # The code and its message (outbox row + event done) commit in ONE transaction: a
        # crash can never leave a code issued whose message was not queued (the sender
        # would then get nothing for an hour).
        # One sender writing in two threads at once (here or on another replica) still gets
        # one code: PairingStore.issue serialises a sender's issuance in the store.
        async with self.records.transaction() as conn:
            text = await self.senders.pairing_text(d.event, conn=conn)
            if text is not None:
                queued = await self.notice(d, text, decision="pairing", conn=conn)
                if not queued:
                    raise RuntimeError("pairing notice queued twice")  # rolls the code back
        if text is None:  # one code per sender per hour: stay quiet
            await self.ignore(d, "unknown_sender")
            return
        self._fault("pairing_issued")
        await self._send_notice(d.event.thread_key, f"ev{d.stored.id}")

    async def route(self, d: Dispatch) -> None:
        ev = d.event
        assert d.binding is not None
        if d.command is not None:
            self.live.add(d.stored.id)
            self.spawn(self._command(d, d.command, d.binding))
            return
        row = await self.records.accept_turn(ev, event_id=d.stored.id, thread=d.thread)
        if row is None:
            return  # accepted before; recovery owns it
        self._fault("turn_accepted")
        key = ev.thread_key
        active = self.active.get(key)
        if active is not None and d.binding.busy_policy == "interrupt":
            log.info("channel.interrupt", thread=key)
            active.cancel()
        self.processor.submit(key, self.bind(self.turns.run, d.stored, row, d.binding,
                                             event=d.stored.id))

    async def _command(self, d: Dispatch, name: str, binding: BindingSettings) -> None:
        try:
            await self._command_once(d, name, binding)
        finally:
            self.live.discard(d.stored.id)

    async def _command_once(self, d: Dispatch, name: str, binding: BindingSettings) -> None:
        try:
            text = await run_command(self.commands, name, d.event, binding)
        except Exception as exc:
            log.exception("command.failed", command=name)
            text = f"⚠️ /{name} failed ({type(exc).__name__})."
        private = isinstance(text, PrivateReply)
        if d.event.extra.get("action") or private:
            # a click on a button: answered where it was made; a private answer to a typed
            # command: ephemeral where the platform can (Slack), else nobody sees it
            try:
                if isinstance(self.client, ApprovalControls):
                    await self.client.answer_action(d.event, text)
            except Exception:
                log.warning("action.answer_failed", command=name, exc_info=True)
            else:
                private = private or d.event.extra.get("answer") == "private"
        if private:
            # The sender alone saw the answer (an ephemeral answer to the click), or nobody
            # did (a refusal to a non-approver's typed /approve): never a thread post, which
            # each click would repeat for everyone (a flood lever).
            await self.inbound.set_status(d.stored.id, "done", decision=f"command:{name}")
            return
        await self.notice(d, text, decision=f"command:{name}")

    # -- the processor's jobs -------------------------------------------------------------------

    def bind(self, fn: Any, *args: Any, order: int | None = None,
             event: int | None = None) -> Callable[[], Any]:
        """A processor job; when it ends, a claim deferred at capacity is tried again. A
        recovered turn (``order``: its event id) takes its place in the lanes' arrival order
        as it starts (recovery starts them together, in order), and gives it up whatever way
        it ends.

        ``event``: the event the job answers. It is live from now until the job ends (no
        recovery starts it again meanwhile). If the job fails because the database went
        away, it is not dropped: once the store answers, the event is picked up again from
        its records, in place (the thread's later jobs still wait behind it), through the
        recovery a restart uses (:meth:`_resume_event`): the turn resumes from its
        checkpoint, an effect of unknown outcome is reported as uncertain, never re-run."""
        if event is not None:
            self.live.add(event)

        async def job() -> None:
            if order is not None:
                self.entry.register(order)
            try:
                attempt: Callable[[], Any] | None = functools.partial(fn, *args)
                resumes = 0
                while attempt is not None:
                    try:
                        await attempt()
                        attempt = None
                    except Exception as exc:
                        if event is None:
                            raise
                        if isinstance(exc, ShuttingDown):
                            # The daemon is stopping (a queued turn woken by the drain):
                            # neither answered nor failed; its pending row waits for the
                            # next start, or for the replica that takes the thread over.
                            log.info("turn.deferred_to_next_start", event_id=event)
                            return
                        if not is_transient(exc):
                            await self._fail_visibly(event, exc)
                            raise
                        resumes += 1
                        log_store_failure("turn.store_unavailable", exc, event_id=event,
                                          resumes=resumes)
                        attempt = await self._resume_event(event, resumes)
            finally:
                if event is not None:
                    self.live.discard(event)
                if order is not None:
                    self.entry.entered(order)
                if self.signals.deferred:
                    self.signals.poke()

        return job

    async def _resume_event(self, event_id: int, resumes: int) -> Callable[[], Any] | None:
        """After a store failure in event ``event_id``'s job: wait until the store answers,
        then what finishes the event (None: nothing is left to do here)."""
        self.signals.outage = True
        await self.records.wait_until_answers(what="turn.waiting_for_store")

        async def read() -> tuple[StoredEvent | None, OutboxRow | None, bool]:
            stored = await self.inbound.get(event_id)
            if stored is None or stored.status not in ("processing", "running"):
                return stored, None, False
            c = self.client
            held = await self.thread_leases.renew(c.platform, c.workspace)
            mine = (stored.event.channel, stored.event.thread_root) in held
            return stored, (await self.outbox.for_event(event_id)) if mine else None, mine

        stored, row, mine = await retry_transient(read, what="turn.resume_read_failed")
        if stored is None or stored.status not in ("processing", "running"):
            return None  # decided meanwhile (its commit went through)
        if not mine:
            log.warning("turn.lease_lost_in_outage", event_id=event_id)
            return None  # another replica took the thread over: it recovers the event
        if row is None:
            # Claimed, never accepted: decided again from the start by the pump.
            await retry_transient(lambda: self.inbound.set_status(event_id, "received"),
                                  what="turn.resume_failed")
            self.signals.poke()
            return None
        if row.kind != "turn":
            return None
        binding = await self.bindings.lookup(stored.event.platform, stored.event.workspace,
                                             stored.event.channel)
        log.info("turn.resumed_after_outage", event_id=event_id, row_status=row.status)
        if resumes > self.MAX_RESUMES and row.status == "pending":
            text = ("⚠️ I could not finish: the database kept failing this turn "
                    f"({resumes} tries). Please ask again.")
            return functools.partial(self.turns.finish, row, text)
        return functools.partial(self.turns.recover, stored, row, binding)

    async def _fail_visibly(self, event_id: int, exc: Exception) -> None:
        """A turn's job failed for a reason that is not the database going away (a bug): end
        the turn with a line in its thread, so its event is not left ``running`` with nobody
        to run it. Not when another replica took the thread over (that run counts), nor when
        the daemon is stopping (``ShuttingDown``): ended here, the next start found the row
        ``ready`` and delivered "Something went wrong" instead of the answer."""
        if isinstance(exc, StoreLeaseLost | ShuttingDown):
            return
        try:
            row = await self.outbox.for_event(event_id)
            if row is not None and row.kind == "turn" and row.status == "pending":
                await self.turns.finish(row, f"⚠️ Something went wrong ({type(exc).__name__}). "
                                             "The operator can find details in the logs.")
        except Exception as again:
            log_store_failure("turn.fail_visibly_failed", again, event_id=event_id)
