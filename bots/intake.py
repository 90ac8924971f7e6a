"""From a recorded event to its dispatch: the intake, the pump and what they share.

* the **intake** (:class:`Intake`) records what platform code hands in and answers its reads
  (it implements the :class:`bots.port.Intake` port: platform code sees the layer only
  through it). Events are recorded durably before the platform is acknowledged. While the
  pump runs and no pass holds the claiming lock, what is recorded is claimed in the
  record's own transaction and handed to the pump. Only the intake (Telegram's
  ``getUpdates``, catch-up) is single, under the connector's bot lease;
* the **pump** (:class:`Pump`) claims recorded events in id order and hands each to the
  router (:mod:`bots.router`): the events of one thread in order, different threads
  concurrently. On PostgreSQL a listener wakes it as soon as any replica records an event
  of this bot;
* the **claim state** (:class:`ClaimState`) is what they share with the router and the lease
  keeper about claiming.

The intake hands its batch to the pump within this module, so a message goes from its record
to the router without a hop back. Part of :class:`~bots.layer.ChannelLayer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from bots.bindings import BindingTable
from bots.events import InboundEvent
from bots.observed import MessagesReceived
from bots.options import LayerOptions
from bots.port import PlatformClient, TurnHost
from bots.router import BaseEventProcessor, Router
from bots.store import EVENTS_CHANNEL, ChannelStore, Cursors, StoredEvent
from geode.daemon.supervisor import Component, describe_error
from geode.secret_redaction import redact_text
from geode.settings import BindingSettings
from geode.store._retry import is_transient

if TYPE_CHECKING:
    from bots.metrics import ChannelMetrics

__all__ = ["CLAIM_LIMIT", "ClaimState", "Handed", "Intake", "Pump"]

log = structlog.get_logger(__name__)

#: events claimed per pump transaction
CLAIM_LIMIT = 100


@dataclass(frozen=True, eq=False)
class Handed:
    """A batch the intake claimed with its record, not dispatched yet."""

    batch: list[StoredEvent]
    #: as many as the claim's limit: the pump claims on after it
    more: bool


class ClaimState:
    """What the intake, the pump, the router and the lease keeper share about claiming."""

    def __init__(self) -> None:
        self.wake = asyncio.Event()
        #: a claim left new threads unclaimed at capacity: a finished job wakes the pump
        self.deferred = False
        #: a pump pass and a recovery never overlap (recovery re-decides claimed events)
        self.claiming = asyncio.Lock()
        #: batches the intake claimed as it recorded them, for the next holder of the lock
        self.handed: list[Handed] = []
        #: the pump's next pass must claim (set by every wake but a hand-off's)
        self.claim_due = False
        #: a store operation failed on a lost connection: once the store answers, what this
        #: replica holds and nothing runs is recovered (``LeaseKeeper.after_outage_soon``)
        self.outage = False
        #: the layer processes (between ``start_processing`` and ``stop_processing``)
        self.processing = False

    def poke(self) -> None:
        """Wake the pump to claim (something was recorded or freed)."""
        self.claim_due = True
        self.wake.set()


# -- the pump -------------------------------------------------------------------------------------


class Pump:
    """Claims recorded events and hands them to the router; see the module docstring."""

    def __init__(
        self,
        *,
        state: ClaimState,
        client: PlatformClient,
        records: ChannelStore,
        host: TurnHost,
        options: LayerOptions,
        processor: BaseEventProcessor,
        router: Router,
        after_outage: Callable[[], None],
    ) -> None:
        self.state = state
        self.client = client
        self.records = records
        self.options = options
        self.processor = processor
        self.router = router
        self.inbound = records.inbound
        self.thread_leases = records.thread_leases
        self.owner = records.owner
        #: how many threads may run or wait here at once (see :meth:`room`)
        self.thread_limit = options.max_concurrent_threads
        if records.is_postgres:
            self.thread_limit = min(self.thread_limit,
                                    host.channel_capacity + options.queue_allowance)
        #: the store answers again after an outage: recover what it left
        self.after_outage = after_outage
        #: the running pump's task (None: the intake only records)
        self.task: asyncio.Task[None] | None = None

    async def run(self, health: Component) -> None:
        s = self.state
        failures = 0
        health.beat("pumping")
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.options.pump_interval_s):
                    await s.wake.wait()
            if not s.wake.is_set():
                s.claim_due = True  # the fallback pass: claim whatever is recorded
            s.wake.clear()
            try:
                await self.pump_once()
            except Exception as exc:
                # one line per failed pass (the traceback at most once a minute); the
                # claimed events stay claimed and are recovered, never dropped
                failures += 1
                s.outage = s.outage or is_transient(exc)
                delay = min(10.0, self.options.pump_interval_s * 2 ** min(failures - 1, 5))
                health.down(f"pump pass failed: {describe_error(exc)} "
                            f"(retrying in {delay:.1f}s)")
                log.warning("channel.pump_failed", error_class=type(exc).__name__,
                            retry_in_s=round(delay, 2), exc_info=exc)
                await asyncio.sleep(delay)
            else:
                failures = 0
                if health.state == "up" and health.detail == "pumping":
                    health.last_beat = health.clock()  # a pass, as data (no call per pass)
                else:
                    health.beat("pumping")  # up again: the transition is logged
                if s.outage:  # the store answers again: recover what the outage left
                    self.after_outage()

    async def pump_once(self) -> None:
        """Claim recorded events in batches and dispatch them until none are left.

        Per-thread order: the events of one thread are dispatched one after another in id
        order, and a batch is finished before the next is claimed; different threads are
        dispatched concurrently (each dispatch waits on the store, so strictly serial
        dispatch made the 50th message of a burst wait for 49 others' transactions).
        Only threads whose lease this replica holds (or takes now) are claimed, and new
        threads only as :meth:`room` allows (the rest wait for room here, or for another
        replica).
        """
        s = self.state
        async with s.claiming:
            if s.handed:
                more = await self.take_handed()
                if not (more or s.claim_due):
                    return  # woken for the intake's batch alone: nothing else to claim
            s.claim_due = False
            await self._pump_batches()

    async def take_handed(self) -> bool:
        """Holding the claiming lock: dispatch the batches the intake claimed; True if the
        pump should claim on (a batch may have left more behind)."""
        more = False
        while self.state.handed:
            handed = self.state.handed.pop(0)
            more = more or handed.more
            await self._dispatch_batch(handed.batch)
        return more

    def room(self) -> int:
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
        return self.thread_limit - self.processor.busy

    async def _pump_batches(self) -> None:
        c = self.client
        limit = CLAIM_LIMIT
        while True:
            room = self.room()
            batch = await self.inbound.claim_batch(c.platform, c.workspace, owner=self.owner,
                                                   limit=limit, leases=self.thread_leases,
                                                   new_threads=room)
            self.state.deferred = self.thread_leases.skipped > 0
            if not batch:
                return
            await self._dispatch_batch(batch)
            if len(batch) < limit:
                # Drained: an event recorded since sets ``wake`` for the next pass, so
                # claiming again now would only cost an empty write transaction.
                return

    async def _dispatch_batch(self, batch: list[StoredEvent]) -> None:
        """Dispatch a claimed batch: each thread's events in order, threads concurrently."""
        # one bot's batch: (channel, thread root) names the thread
        chains: dict[tuple[str, str], list[StoredEvent]] = {}
        for stored in batch:
            chains.setdefault((stored.event.channel, stored.event.thread_root),
                              []).append(stored)
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

    async def _dispatch_chain(self, chain: list[StoredEvent]) -> None:
        for i, stored in enumerate(chain):
            try:
                await self.router.dispatch(stored)
            except Exception:
                # As before batching: the failed event stays claimed (recovery decides it
                # again at the next start); the thread's later events go back to
                # ``received`` undecided, for the next pump.
                await self.inbound.release([s.id for s in chain[i + 1:]])
                raise

    async def listen(self, health: Component) -> None:
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
                        self.state.poke()
            except Exception as exc:  # the connection dropped: poll until it is back
                failures += 1
                # not a readiness failure: the pump's fallback pass finds what is recorded
                health.beat(f"reconnecting ({describe_error(exc)}); the pump polls meanwhile")
                log.warning("channel.listen_failed", error_class=type(exc).__name__,
                            error=redact_text(str(exc))[:300])
            self.state.poke()  # whatever was recorded meanwhile
            await asyncio.sleep(min(30.0, 0.5 * 2 ** min(failures, 6)))


# -- the intake -----------------------------------------------------------------------------------


class Intake:
    """Records events and answers platform code's reads; see the module docstring."""

    def __init__(
        self,
        *,
        state: ClaimState,
        pump: Pump,
        client: PlatformClient,
        records: ChannelStore,
        host: TurnHost,
        options: LayerOptions,
        bindings: BindingTable,
        fault: Callable[[str], None] | None = None,
        metrics: ChannelMetrics | None = None,
    ) -> None:
        self.state = state
        self.pump = pump
        self.client = client
        self.host = host
        #: the daemon's channel counters (messages received), incremented here; None: none
        self.metrics = metrics
        self.options = options
        self.bindings = bindings
        #: test seam: called with a point name; a test raises there to simulate a crash
        self.fault = fault
        self.owner = records.owner
        self.inbound = records.inbound
        self.threads = records.threads
        self.index = records.index
        self.thread_leases = records.thread_leases

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
        s = self.state
        # Only once the pump runs: at start, the threads left unfinished are taken over
        # (and recovered) first, and a claim taking a free thread's lease before that
        # would hide it from the take-over.
        try:
            if (s.processing and self.pump.task is not None and not s.claiming.locked()
                    and any(status == "received" for _, status in events)):
                return await self._record_and_claim(events, cursor=cursor)
            ids = await self.inbound.record(events, cursor=cursor)
        except Exception as exc:
            # a commit may have claimed what it recorded before the connection broke: the
            # claimed events are recovered once the store answers (the caller retries)
            if is_transient(exc):
                s.outage = True
            raise
        if self.fault is not None:
            self.fault("recorded")
        if ids:
            p = self.client.platform
            self.host.publish(MessagesReceived(platform=p, count=len(ids)))
            if self.metrics is not None:
                self.metrics.messages_received.labels(platform=p).inc(len(ids))
            s.poke()
        return ids

    async def _record_and_claim(
        self, events: Sequence[tuple[InboundEvent, str]], *, cursor: tuple[str, str] | None
    ) -> list[int]:
        """No pump pass running: record the events and claim what the pump would claim
        next in ONE transaction (``InboundLog.record_and_claim``), holding the claiming lock
        as a pass does, and hand the claimed batch to the pump (woken): whoever takes the
        lock next dispatches it first (``Pump.take_handed``), without claiming again."""
        c = self.client
        s = self.state
        limit = CLAIM_LIMIT
        handed: Handed | None = None
        async with s.claiming:  # free: checked by the caller, no await since
            room = self.pump.room()
            ids, batch = await self.inbound.record_and_claim(
                events, cursor=cursor, platform=c.platform, workspace=c.workspace,
                owner=self.owner, limit=limit, leases=self.thread_leases, new_threads=room)
            if ids:
                s.deferred = self.thread_leases.skipped > 0
            if batch:
                handed = Handed(batch=batch, more=len(batch) >= limit)
                s.handed.append(handed)
        try:
            if self.fault is not None:
                self.fault("recorded")
        except Exception:
            # what is claimed is dispatched anyway: a recorded event must not wait for a
            # restart because the intake's caller failed after the commit
            s.wake.set()
            raise
        except BaseException:  # a simulated crash: nothing more happens in this process
            if handed is not None and handed in s.handed:
                s.handed.remove(handed)
            raise
        if ids:
            p = self.client.platform
            self.host.publish(MessagesReceived(platform=p, count=len(ids)))
            if self.metrics is not None:
                self.metrics.messages_received.labels(platform=p).inc(len(ids))
        if handed is not None:
            s.wake.set()
        return ids

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
