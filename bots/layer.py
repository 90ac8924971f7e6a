"""ChannelLayer: the platform-neutral part every connector shares.

It owns the store-backed parts (inbound log, outbox, threads, message index, pairing,
bindings), the dispatcher and the per-thread processor, and the two loops:

* the **pump** claims recorded events in id order and dispatches them: the events of one
  thread in order, different threads concurrently (cheap checks run inline; turns go to
  the per-thread processor, commands run at once). When no pass is running, the intake
  claims what it records in the record's own transaction and hands the batch to the pump;
* **recovery** finishes what a previous run left in the threads this replica takes over
  (at :meth:`start_processing`, then at each heartbeat): events claimed but not decided are
  dispatched again, accepted turns are resumed or delivered, ready outbox rows are sent;
* the **heartbeat** renews this replica's thread leases, drops idle ones, and takes over the
  threads of a replica that stopped renewing (:class:`~bots.store.ThreadLeases`).

Every replica processes (active-active); a thread's events are claimed only with its
thread lease, so one replica at a time runs a thread, in order, and two replicas never
answer the same event. Only the intake (Telegram's ``getUpdates``, catch-up) is single, under
the connector's bot lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from bots._aio import reap
from bots.approvals import ApprovalWaiters
from bots.bindings import BindingTable
from bots.commands import ActiveTurn, CommandContext, PrivateReply, run_command
from bots.dispatcher import (
    BaseEventProcessor,
    Dispatch,
    DispatchContext,
    Dispatcher,
    ThreadOrderedProcessor,
)
from bots.events import InboundEvent, thread_key
from bots.options import LayerOptions
from bots.outbound import Deliverer
from bots.port import ApprovalControls, PlatformClient, TurnHost
from bots.senders import SenderPolicy
from bots.store import (
    EVENTS_CHANNEL,
    ChannelStore,
    Cursors,
    OutboxRow,
    StoredEvent,
    Thread,
    Tx,
)
from bots.store import ThreadLeaseLost as StoreLeaseLost
from bots.turns import EntryOrder, TurnDeps, TurnRunner
from bots.uploads import FileSender
from geode.daemon.supervisor import Component, TaskSupervisor, describe_error
from geode.errors import ShuttingDown
from geode.hooks.events import (
    ChannelEvent,
    MessagesReceived,
    ThreadLeaseLost,
    ThreadLeases,
    ThreadsTakenOver,
)
from geode.secret_redaction import redact_text
from geode.settings import BindingSettings
from geode.store._retry import is_transient, log_store_failure, retry_transient

__all__ = ["ChannelLayer", "LayerOptions"]

log = structlog.get_logger(__name__)


class ChannelLayer:
    """See the module docstring. Built by :meth:`BaseConnector.start`.

    Its collaborators are ports, given at construction: ``client`` (the platform's I/O and
    identity, :class:`~bots.port.PlatformClient`; never the connector's lifecycle),
    ``records`` (the channel store), ``host`` (the harness, :class:`~bots.port.TurnHost`)
    and the ``fault`` seam. Platform code sees the layer only as :class:`~bots.port.Intake`.
    """

    def __init__(
        self,
        *,
        client: PlatformClient,
        records: ChannelStore,
        host: TurnHost,
        bindings: Sequence[BindingSettings],
        options: LayerOptions,
        processor: BaseEventProcessor | None = None,
        fault: Callable[[str], None] | None = None,
        supervisor: TaskSupervisor | None = None,
    ) -> None:
        self.client = client
        #: runs the pump, the lease keeper and the listener (restarted when they die) and
        #: reports their health on /readyz
        self.supervisor = supervisor or TaskSupervisor()
        self.records = records
        self.host = host
        self.options = options
        self.owner = records.owner
        self.inbound = records.inbound
        self.outbox = records.outbox
        self.threads = records.threads
        self.index = records.index
        self.pairing = records.pairing
        self.senders = SenderPolicy(pairing=self.pairing)
        self.bindings = BindingTable(configured=bindings, stored=records.bindings)
        self.processor = processor or ThreadOrderedProcessor(
            max_concurrent=options.max_concurrent_threads)
        #: test seam: called with a point name; a test raises there to simulate a crash
        self.fault: Callable[[str], None] = fault or _no_fault
        self.active: dict[str, ActiveTurn] = {}
        self.entry = EntryOrder()
        self.thread_leases = records.thread_leases
        # Collaborators get what they use, at construction (never the layer itself).
        self.dispatcher = Dispatcher(
            ctx=DispatchContext(
                owner=self.owner, inbound=self.inbound, bindings=self.bindings,
                threads=self.threads, senders=self.senders,
                bot_user_id=client.bot_user_id, bot_username=client.bot_username,
                ignore=self.ignore, pairing_notice=self.pairing_notice,
            ),
            route=self.route,
        )
        self.deliverer = Deliverer(client=client, outbox=self.outbox,
                                   fault=self._fault_at, observe=self._observe)
        self.approvals = records.approvals
        self.waiters = ApprovalWaiters()
        self.files = FileSender(client=client, outbox=self.outbox)
        self.turns = TurnRunner(deps=TurnDeps(
            client=client, host=host, inbound=self.inbound, outbox=self.outbox,
            deliverer=self.deliverer, threads=self.threads, index=self.index,
            thread_leases=self.thread_leases, options=options, active=self.active,
            fault=self._fault_at, approvals=self.approvals, waiters=self.waiters,
            entry=self.entry, queue=records.queue, files=self.files,
            attachments=records.attachments,
        ))
        self.commands = CommandContext(threads=self.threads, host=host, active=self.active,
                                       queued=self.processor.pending,
                                       approvals=self.approvals, waiters=self.waiters)
        self._wake = asyncio.Event()
        #: a claim left new threads unclaimed at capacity: a finished job wakes the pump
        self._deferred = False
        #: the heartbeat could not renew for a TTL and stopped the running threads
        self._stalled = False
        #: a pump pass and a recovery never overlap (recovery re-decides claimed events)
        self._claiming = asyncio.Lock()
        #: batches the intake claimed as it recorded them, for the next holder of the lock
        self._handed: list[_Handed] = []
        #: the pump's next pass must claim (set by every wake but a hand-off's)
        self._claim_due = False
        self._pump_task: asyncio.Task[None] | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._listen_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        #: events with a live job here (a turn submitted to the processor, a command
        #: running): recovery never starts them a second time
        self._live: set[int] = set()
        #: a store operation failed on a lost connection: once the store answers, what this
        #: replica holds and nothing runs is recovered (:meth:`_after_outage`)
        self._outage = False
        self._sweeper: asyncio.Task[None] | None = None
        self.processing = False

    def _fault_at(self, point: str) -> None:
        self.fault(point)  # read on each call: a test may set the seam after construction

    # -- intake -----------------------------------------------------------------------------

    async def submit(
        self, events: Sequence[tuple[InboundEvent, str]], *, cursor: tuple[str, str] | None = None
    ) -> list[int]:
        now = time.time()
        max_age = self.options.catch_up_max_age_s
        events = [
            (ev, "expired" if status == "received" and ev.date and now - ev.date > max_age
             else status)
            for ev, status in events
        ]
        # Only once the pump runs: at start, the threads left unfinished are taken over
        # (and recovered) first, and a claim taking a free thread's lease before that
        # would hide it from the take-over.
        try:
            if (self.processing and self._pump_task is not None and not self._claiming.locked()
                    and any(status == "received" for _, status in events)):
                return await self._record_and_claim(events, cursor=cursor)
            ids = await self.inbound.record(events, cursor=cursor)
        except Exception as exc:
            # a commit may have claimed what it recorded before the connection broke: the
            # claimed events are recovered once the store answers (the caller retries)
            if is_transient(exc):
                self._outage = True
            raise
        self.fault("recorded")
        if ids:
            self._observe(MessagesReceived(platform=self.client.platform, count=len(ids)))
            self._poke()
        return ids

    async def _record_and_claim(
        self, events: Sequence[tuple[InboundEvent, str]], *, cursor: tuple[str, str] | None
    ) -> list[int]:
        """No pump pass running: record the events and claim what the pump would claim
        next in ONE transaction (``InboundLog.record_and_claim``), holding the claiming lock
        as a pass does, and hand the claimed batch to the pump (woken): whoever takes the
        lock next dispatches it first (:meth:`_take_handed`), without claiming again."""
        c = self.client
        limit = self._CLAIM_LIMIT
        handed: _Handed | None = None
        async with self._claiming:  # free: checked by the caller, no await since
            room = self._room()
            ids, batch = await self.inbound.record_and_claim(
                events, cursor=cursor, platform=c.platform, workspace=c.workspace,
                owner=self.owner, limit=limit, leases=self.thread_leases, new_threads=room)
            if ids:
                self._deferred = self.thread_leases.skipped > 0
            if batch:
                handed = _Handed(batch=batch, more=len(batch) >= limit)
                self._handed.append(handed)
        try:
            self.fault("recorded")
        except Exception:
            # what is claimed is dispatched anyway: a recorded event must not wait for a
            # restart because the intake's caller failed after the commit
            self._wake.set()
            raise
        except BaseException:  # a simulated crash: nothing more happens in this process
            if handed is not None and handed in self._handed:
                self._handed.remove(handed)
            raise
        if ids:
            self._observe(MessagesReceived(platform=self.client.platform, count=len(ids)))
        if handed is not None:
            self._wake.set()
        return ids

    async def _take_handed(self) -> bool:
        """Holding the claiming lock: dispatch the batches the intake claimed; True if the
        pump should claim on (a batch may have left more behind)."""
        more = False
        while self._handed:
            handed = self._handed.pop(0)
            more = more or handed.more
            await self._dispatch_batch(handed.batch)
        return more

    # -- the intake port's reads (bots.port.Intake) ---------------------------------------------

    @property
    def cursors(self) -> Cursors:
        return self.inbound.cursors

    async def binding_for(
        self, platform: str, workspace: str, channel: str
    ) -> BindingSettings | None:
        return await self.bindings.lookup(platform, workspace, channel)

    def bound_channels(self, platform: str) -> list[BindingSettings]:
        return self.bindings.channels(platform)

    async def refresh_bindings(self) -> None:
        await self.bindings.refresh(force=True)

    async def thread_of(
        self, platform: str, workspace: str, channel: str, message_id: str
    ) -> str | None:
        return await self.index.thread_of(platform, workspace, channel, message_id)

    async def latest_thread(self, platform: str, workspace: str, channel: str) -> str | None:
        return await self.threads.latest_in_channel(platform, workspace, channel)

    async def engaged_roots(
        self, platform: str, workspace: str, channel: str, *, limit: int
    ) -> list[str]:
        return await self.threads.engaged_roots(platform, workspace, channel, limit=limit)

    async def known_keys(self, dedupe_keys: Sequence[str]) -> set[str]:
        return await self.inbound.known_keys(dedupe_keys)

    # -- processing ---------------------------------------------------------------------------

    async def start_processing(self) -> None:
        """Take over and recover the threads nobody holds, then pump new events.

        The pump, the lease keeper (``_heartbeat``) and the PostgreSQL listener run under
        the supervisor as ``<platform>.pump``, ``<platform>.leases`` and
        ``<platform>.listen``: a death is logged with its cause and restarted with backoff,
        and each beats as it works (``/readyz`` names the one that stalls). Raises if the
        take-over fails (the caller retries: nothing has started then).
        """
        if self.processing:
            return
        await self.bindings.refresh(force=True)
        self.processing = True
        try:
            await self.take_over()
        except BaseException:
            self.processing = False
            raise
        p = self.client.platform
        sup = self.supervisor
        interval = self.options.pump_interval_s
        sup.spawn(f"{p}.pump", self._pump, stale_after_s=max(60.0, 10 * interval))
        sup.spawn(f"{p}.leases", self._heartbeat, stale_after_s=self.options.lease_ttl_s)
        self._pump_task = sup.task(f"{p}.pump")
        self._heartbeat_task = sup.task(f"{p}.leases")
        if self.records.is_postgres:
            sup.spawn(f"{p}.listen", self._listen)
            self._listen_task = sup.task(f"{p}.listen")

    async def stop_claiming(self) -> None:
        """Claim nothing more (SIGTERM's drain): the pump and the listener stop; the intake
        only records from now on. Running jobs go on; :meth:`stop_processing` ends them."""
        p = self.client.platform
        self._pump_task = None  # submit records without claiming (see submit)
        await self.supervisor.cancel(f"{p}.pump")
        await self.supervisor.cancel(f"{p}.listen")
        self._listen_task = None

    @property
    def idle(self) -> bool:
        """No thread job (a turn, its delivery) and no command runs here."""
        return self.processor.busy == 0 and not self._tasks

    async def stop_processing(self) -> None:
        was = self.processing
        self.processing = False
        p = self.client.platform
        for name in (f"{p}.listen", f"{p}.leases", f"{p}.pump"):
            await self.supervisor.cancel(name)
        self._pump_task = self._heartbeat_task = self._listen_task = None
        # never dispatched: claimed and undecided, recovered by whoever takes the threads
        self._handed.clear()
        await self.processor.aclose()
        for t in list(self._tasks):
            await reap(t)
        if was:
            # Nothing of ours runs any more: whatever is unfinished is recovered by the
            # replica (or the next run) that takes the threads.
            c = self.client
            try:
                await self.thread_leases.release_all(c.platform, c.workspace)
            except Exception:
                log.warning("thread_leases.release_failed", exc_info=True)

    async def stop(self) -> None:
        await self.stop_processing()

    async def _pump(self, health: Component) -> None:
        failures = 0
        health.beat("pumping")
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.options.pump_interval_s):
                    await self._wake.wait()
            if not self._wake.is_set():
                self._claim_due = True  # the fallback pass: claim whatever is recorded
            self._wake.clear()
            try:
                await self.pump_once()
            except Exception as exc:
                # one line per failed pass (the traceback at most once a minute); the
                # claimed events stay claimed and are recovered, never dropped
                failures += 1
                self._outage = self._outage or is_transient(exc)
                delay = min(10.0, self.options.pump_interval_s * 2 ** min(failures - 1, 5))
                health.down(f"pump pass failed: {describe_error(exc)} "
                            f"(retrying in {delay:.1f}s)")
                log.warning("channel.pump_failed", error_class=type(exc).__name__,
                            retry_in_s=round(delay, 2), exc_info=exc)
                await asyncio.sleep(delay)
            else:
                failures = 0
                health.beat("pumping")
                if self._outage:  # the store answers again: recover what the outage left
                    self._after_outage_soon()

    async def pump_once(self) -> None:
        """Claim recorded events in batches and dispatch them until none are left.

        Per-thread order: the events of one thread are dispatched one after another in id
        order, and a batch is finished before the next is claimed; different threads are
        dispatched concurrently (each dispatch waits on the store, so strictly serial
        dispatch made the 50th message of a burst wait for 49 others' transactions).
        Only threads whose lease this replica holds (or takes now) are claimed, and new
        threads only as :meth:`_room` allows (the rest wait for room here, or for another
        replica).
        """
        async with self._claiming:
            if self._handed:
                more = await self._take_handed()
                if not (more or self._claim_due):
                    return  # woken for the intake's batch alone: nothing else to claim
            self._claim_due = False
            await self._pump_batches()

    def _room(self) -> int:
        """New threads this replica may claim now.

        At most ``max_concurrent_threads`` running or waiting here. On a shared
        (PostgreSQL) store also no more than it can start soon: its channel lanes (the
        ``[lanes]`` channel cap of this process) plus ``queue_allowance``. A replica that
        claimed every new thread (the one whose intake records them claims first) queued
        them behind its own lanes while its peers sat idle; the rest now wait unclaimed in
        the store, where any replica with room claims them (woken by the record's
        notification). On SQLite, one process serves the store: it claims them all, and
        each waiting thread shows its place in the queue.
        """
        limit = self.options.max_concurrent_threads
        if self.records.is_postgres:
            limit = min(limit, self.host.channel_capacity + self.options.queue_allowance)
        return limit - self.processor.busy

    def _poke(self) -> None:
        """Wake the pump to claim (something was recorded or freed)."""
        self._claim_due = True
        self._wake.set()

    #: events claimed per pump transaction
    _CLAIM_LIMIT = 100

    async def _pump_batches(self) -> None:
        c = self.client
        limit = self._CLAIM_LIMIT
        while True:
            room = self._room()
            batch = await self.inbound.claim_batch(c.platform, c.workspace, owner=self.owner,
                                                   limit=limit, leases=self.thread_leases,
                                                   new_threads=room)
            self._deferred = self.thread_leases.skipped > 0
            if not batch:
                return
            await self._dispatch_batch(batch)
            if len(batch) < limit:
                # Drained: an event recorded since sets ``_wake`` for the next pass, so
                # claiming again now would only cost an empty write transaction.
                return

    async def _dispatch_batch(self, batch: list[StoredEvent]) -> None:
        """Dispatch a claimed batch: each thread's events in order, threads concurrently."""
        chains: dict[str, list[StoredEvent]] = {}
        for stored in batch:
            chains.setdefault(stored.event.thread_key, []).append(stored)
        if len(chains) == 1:  # one thread (the usual pass): no task to gather
            (chain,) = chains.values()
            await self._dispatch_chain(chain)
            results: list[Any] = []
        else:
            results = await asyncio.gather(*(self._dispatch_chain(ch)
                                             for ch in chains.values()),
                                           return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        for r in failed:
            if isinstance(r, asyncio.CancelledError):
                raise r
        if failed:
            raise failed[0]

    async def _listen(self, health: Component) -> None:
        """PostgreSQL: wake the pump as soon as any replica records an event of this bot (a
        thread this replica holds may have a new message); ``pump_interval_s`` is the
        fallback while the listening connection is down."""
        c = self.client
        bot = f"{c.platform}:{c.workspace}"
        failures = 0
        while True:
            try:
                async for payload in self.records.notifications(EVENTS_CHANNEL):
                    failures = 0
                    health.beat("listening")
                    recorded_for, _, origin = payload.partition(" ")
                    if recorded_for == bot and origin != self.owner:  # ours woke us already
                        self._poke()
            except Exception as exc:  # the connection dropped: poll until it is back
                failures += 1
                # not a readiness failure: the pump's fallback pass finds what is recorded
                health.beat(f"reconnecting ({describe_error(exc)}); the pump polls meanwhile")
                log.warning("channel.listen_failed", error_class=type(exc).__name__,
                            error=redact_text(str(exc))[:300])
            self._poke()  # whatever was recorded meanwhile
            await asyncio.sleep(min(30.0, 0.5 * 2 ** min(failures, 6)))

    async def _dispatch_chain(self, chain: list[StoredEvent]) -> None:
        for i, stored in enumerate(chain):
            try:
                await self.dispatcher.dispatch(stored)
            except Exception:
                # As before batching: the failed event stays claimed (recovery decides it
                # again at the next start); the thread's later events go back to
                # ``received`` undecided, for the next pump.
                await self.inbound.release([s.id for s in chain[i + 1:]])
                raise

    # -- thread leases ----------------------------------------------------------------------------

    async def _heartbeat(self, health: Component) -> None:
        """Renew this replica's thread leases; drop idle ones; take over dead replicas'."""
        ttl = self.options.lease_ttl_s
        last_renewed = time.monotonic()
        health.beat("renewing")
        while True:
            await asyncio.sleep(max(0.05, ttl / 3))
            try:
                await self.heartbeat_once()
                last_renewed = time.monotonic()
                health.beat("renewing")
                if self._outage:  # the store answers again: recover what the outage left
                    self._after_outage_soon()
            except Exception as exc:
                self._outage = self._outage or is_transient(exc)
                health.down(f"thread leases not renewed for "
                            f"{time.monotonic() - last_renewed:.0f}s: {describe_error(exc)}")
                log.warning("thread_leases.heartbeat_failed", error_class=type(exc).__name__,
                            exc_info=exc)
                if time.monotonic() - last_renewed > ttl and not self._stalled:
                    # Our leases may have been taken over by now: stop running threads
                    # another replica may be recovering (it starts them again).
                    log.error("thread_leases.expired", platform=self.client.platform)
                    self._stalled = True
                    await self.processor.aclose()

    async def heartbeat_once(self) -> None:
        c = self.client
        held = await self.thread_leases.renew(c.platform, c.workspace)
        if self._stalled:
            # Back after a stall that stopped our turns: what nobody took over is still
            # ours and unfinished; recover it like a taken-over thread.
            self._stalled = False
            await self.recover(held)
        self._observe(ThreadLeases(platform=c.platform, held=len(held)))
        keys = {thread_key(c.platform, c.workspace, ch, root) for ch, root in held}
        for key in self.processor.keys():
            if key not in keys:  # taken over while we were stalled: it runs elsewhere now
                log.warning("thread_leases.lost", thread=key)
                self._observe(ThreadLeaseLost(platform=c.platform))
                await self.processor.cancel(key)
        await self.thread_leases.release_idle(c.platform, c.workspace)
        await self.take_over()

    async def take_over(self) -> None:
        c = self.client
        taken = await self.thread_leases.take_over(c.platform, c.workspace)
        if taken:
            log.info("thread_leases.taken_over", threads=len(taken))
            self._observe(ThreadsTakenOver(platform=c.platform, count=len(taken)))
            await self.recover(taken)

    def _observe(self, event: ChannelEvent) -> None:
        """Tell the daemon's observers (its metrics); they decide nothing."""
        self.host.publish(event)

    async def recover(self, threads: set[Thread]) -> None:
        """Finish what another run left in ``threads`` (whose leases this replica took)."""
        async with self._claiming:
            await self._recover(threads)

    async def _recover(self, threads: set[Thread]) -> None:
        c = self.client
        # claimed by the intake with their record and handed to the pump, which dispatches
        # them after this recovery (as it would have claimed them): not left over
        handed = {s.id for h in self._handed for s in h.batch}
        for stored in await self.inbound.unfinished(c.platform, c.workspace):
            if (stored.event.channel, stored.event.thread_root) not in threads:
                continue
            if stored.id in handed or stored.id in self._live:
                continue  # dispatched after this / running here now: not left over
            row = await self.outbox.for_event(stored.id)
            if row is None:
                # Claimed, never decided (no reply row): decide again from the start.
                await self.inbound.set_status(stored.id, "received")
                continue
            if row.kind != "turn":
                continue  # notices are swept below
            binding = await self.bindings.lookup(stored.event.platform, stored.event.workspace,
                                                 stored.event.channel)
            log.info("recover.turn", event_id=stored.id, row_status=row.status)
            self.processor.submit(stored.event.thread_key, self._bind(
                self.turns.recover, stored, row, binding, order=stored.id, event=stored.id))
        for row in await self.outbox.open_rows(c.platform, c.workspace):
            if row.kind == "notice" and (row.target.channel, row.target.thread_root) in threads:
                self._spawn(self.deliverer.deliver(row))
        self._poke()

    def _bind(self, fn: Any, *args: Any, order: int | None = None,
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
            self._live.add(event)

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
                    self._live.discard(event)
                if order is not None:
                    self.entry.entered(order)
                if self._deferred:
                    self._poke()

        return job

    #: resumes of one job after store failures before its turn is ended with a message (a
    #: store that answers a probe but fails the turn's writes every time)
    _MAX_RESUMES = 8

    async def _resume_event(self, event_id: int, resumes: int) -> Callable[[], Any] | None:
        """After a store failure in event ``event_id``'s job: wait until the store answers,
        then what finishes the event (None: nothing is left to do here)."""
        self._outage = True
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
            self._poke()
            return None
        if row.kind != "turn":
            return None
        binding = await self.bindings.lookup(stored.event.platform, stored.event.workspace,
                                             stored.event.channel)
        log.info("turn.resumed_after_outage", event_id=event_id, row_status=row.status)
        if resumes > self._MAX_RESUMES and row.status == "pending":
            text = ("⚠️ I could not finish: the database kept failing this turn "
                    f"({resumes} tries). Please ask again.")
            return functools.partial(self.turns.finish, row, text)
        return functools.partial(self.turns.recover, stored, row, binding)

    def _after_outage_soon(self) -> None:
        """:meth:`_after_outage` in a task of its own, one at a time: the pump and the lease
        keeper must not wait for a recovery (a lease keeper stuck behind one let this
        replica's leases expire, and another replica took over threads still running here)."""
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._after_outage(), name="channel-recover")
            self._tasks.add(self._sweeper)
            self._sweeper.add_done_callback(self._tasks.discard)

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

    async def _after_outage(self) -> None:
        """A store operation of this layer failed on a lost connection: once the store
        answers, recover every thread this replica holds that has unfinished work and no
        live job (an event claimed by a commit whose answer was lost, a claimed event whose
        dispatch failed). Jobs that failed resume themselves (:meth:`_bind`)."""
        await self.records.wait_until_answers(what="channel.waiting_for_store")
        c = self.client
        try:
            held = await self.thread_leases.renew(c.platform, c.workspace)
            self._outage = False
            await self.recover(held)
        except Exception as exc:
            if not is_transient(exc):
                raise
            self._outage = True
            log_store_failure("channel.recover_failed", exc)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- decisions (called by the dispatcher's middleware) --------------------------------------

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
        self.fault("pairing_issued")
        await self._send_notice(d.event.thread_key, f"ev{d.stored.id}")

    async def route(self, d: Dispatch) -> None:
        ev = d.event
        assert d.binding is not None
        if d.command is not None:
            self._live.add(d.stored.id)
            self._spawn(self._command(d, d.command, d.binding))
            return
        row = await self.records.accept_turn(ev, event_id=d.stored.id, thread=d.thread)
        if row is None:
            return  # accepted before; recovery owns it
        self.fault("turn_accepted")
        active = self.active.get(ev.thread_key)
        if active is not None and d.binding.busy_policy == "interrupt":
            log.info("channel.interrupt", thread=ev.thread_key)
            active.cancel()
        self.processor.submit(ev.thread_key, self._bind(self.turns.run, d.stored, row,
                                                        d.binding, event=d.stored.id))

    async def _command(self, d: Dispatch, name: str, binding: BindingSettings) -> None:
        try:
            await self._command_once(d, name, binding)
        finally:
            self._live.discard(d.stored.id)

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
            # each click would repeat for everyone (a flood lever, issue #30).
            await self.inbound.set_status(d.stored.id, "done", decision=f"command:{name}")
            return
        await self.notice(d, text, decision=f"command:{name}")


@dataclass(frozen=True, eq=False)
class _Handed:
    """A batch the intake claimed with its record, not dispatched yet."""

    batch: list[StoredEvent]
    #: as many as the claim's limit: the pump claims on after it
    more: bool


def _no_fault(point: str) -> None:
    return None
