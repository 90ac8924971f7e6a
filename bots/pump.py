"""The pump: claims recorded events in id order and dispatches them.

The events of one thread in order, different threads concurrently (cheap checks run inline;
turns go to the per-thread processor, commands run at once). When no pass is running, the
intake (:mod:`bots.intake`) claims what it records in the record's own transaction and
hands the batch here (:class:`ClaimState`). On PostgreSQL a listener wakes the pump as soon
as any replica records an event of this bot. Part of :class:`~bots.layer.ChannelLayer`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from bots.dispatcher import BaseEventProcessor, Dispatcher
from bots.options import LayerOptions
from bots.port import PlatformClient, TurnHost
from bots.store import EVENTS_CHANNEL, ChannelStore, StoredEvent
from geode.daemon.supervisor import Component, describe_error
from geode.secret_redaction import redact_text
from geode.store._retry import is_transient

__all__ = ["CLAIM_LIMIT", "ClaimState", "Handed", "Pump"]

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


class Pump:
    """Claims and dispatches; see the module docstring."""

    def __init__(
        self,
        *,
        state: ClaimState,
        client: PlatformClient,
        records: ChannelStore,
        host: TurnHost,
        options: LayerOptions,
        processor: BaseEventProcessor,
        dispatcher: Dispatcher,
        after_outage: Callable[[], None],
    ) -> None:
        self.state = state
        self.client = client
        self.records = records
        self.host = host
        self.options = options
        self.processor = processor
        self.dispatcher = dispatcher
        self.inbound = records.inbound
        self.thread_leases = records.thread_leases
        self.owner = records.owner
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
                health.beat("pumping")
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
        limit = self.options.max_concurrent_threads
        if self.records.is_postgres:
            limit = min(limit, self.host.channel_capacity + self.options.queue_allowance)
        return limit - self.processor.busy

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
