"""The lease keeper: this replica's thread leases, and the recovery of what it takes.

* the **heartbeat** renews this replica's thread leases, drops idle ones, and takes over the
  threads of a replica that stopped renewing (:class:`~bots.store.ThreadLeases`);
* **recovery** finishes what a previous run left in the threads this replica takes over
  (at ``ChannelLayer.start_processing``, then at each heartbeat): events claimed but not
  decided are dispatched again, accepted turns are resumed or delivered, ready outbox rows
  are sent; after a store outage, the same for every thread this replica holds.

Part of :class:`~bots.layer.ChannelLayer`.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import structlog

from bots.bindings import BindingTable
from bots.events import thread_key
from bots.intake import ClaimState
from bots.observed import ThreadLeaseLost, ThreadLeases, ThreadsTakenOver
from bots.options import LayerOptions
from bots.port import PlatformClient, TurnHost
from bots.router import BaseEventProcessor, Router
from bots.store import ChannelStore, Thread
from bots.turn import Deliverer, TurnRunner
from geode.daemon.supervisor import Component, describe_error
from geode.store._retry import is_transient, log_store_failure

if TYPE_CHECKING:
    from bots.metrics import ChannelMetrics

__all__ = ["LeaseKeeper"]

log = structlog.get_logger(__name__)


class LeaseKeeper:
    """Renews, takes over and recovers; see the module docstring."""

    def __init__(
        self,
        *,
        state: ClaimState,
        router: Router,
        client: PlatformClient,
        records: ChannelStore,
        host: TurnHost,
        options: LayerOptions,
        bindings: BindingTable,
        processor: BaseEventProcessor,
        deliverer: Deliverer,
        turns: TurnRunner,
        metrics: ChannelMetrics | None = None,
    ) -> None:
        self.state = state
        self.router = router
        self.client = client
        self.records = records
        self.host = host
        #: the daemon's channel counters (threads held, taken over, lost), incremented here;
        #: None: none
        self.metrics = metrics
        self.options = options
        self.bindings = bindings
        self.processor = processor
        self.deliverer = deliverer
        self.turns = turns
        self.inbound = records.inbound
        self.outbox = records.outbox
        self.thread_leases = records.thread_leases
        #: the heartbeat could not renew for a TTL and stopped the running threads
        self.stalled = False
        self._sweeper: asyncio.Task[None] | None = None

    async def run(self, health: Component) -> None:
        """Renew this replica's thread leases; drop idle ones; take over dead replicas'."""
        s = self.state
        ttl = self.options.lease_ttl_s
        last_renewed = time.monotonic()
        health.beat("renewing")
        while True:
            await asyncio.sleep(max(0.05, ttl / 3))
            try:
                await self.heartbeat_once()
                last_renewed = time.monotonic()
                health.beat("renewing")
                if s.outage:  # the store answers again: recover what the outage left
                    self.after_outage_soon()
            except Exception as exc:
                s.outage = s.outage or is_transient(exc)
                health.down(f"thread leases not renewed for "
                            f"{time.monotonic() - last_renewed:.0f}s: {describe_error(exc)}")
                log.warning("thread_leases.heartbeat_failed", error_class=type(exc).__name__,
                            exc_info=exc)
                if time.monotonic() - last_renewed > ttl and not self.stalled:
                    # Our leases may have been taken over by now: stop running threads
                    # another replica may be recovering (it starts them again).
                    log.error("thread_leases.expired", platform=self.client.platform)
                    self.stalled = True
                    await self.processor.aclose()

    async def heartbeat_once(self) -> None:
        c = self.client
        held = await self.thread_leases.renew(c.platform, c.workspace)
        if self.stalled:
            # Back after a stall that stopped our turns: what nobody took over is still
            # ours and unfinished; recover it like a taken-over thread.
            self.stalled = False
            await self.recover(held)
        self.host.publish(ThreadLeases(platform=c.platform, held=len(held)))
        metrics = self.metrics
        if metrics is not None:
            metrics.threads_held.labels(platform=c.platform).set(len(held))
        keys = {thread_key(c.platform, c.workspace, ch, root) for ch, root in held}
        for key in self.processor.keys():
            if key not in keys:  # taken over while we were stalled: it runs elsewhere now
                log.warning("thread_leases.lost", thread=key)
                self.host.publish(ThreadLeaseLost(platform=c.platform))
                if metrics is not None:
                    metrics.thread_leases_lost.labels(platform=c.platform).inc()
                await self.processor.cancel(key)
        await self.stop_requested()
        await self.thread_leases.release_idle(c.platform, c.workspace)
        await self.take_over()

    async def stop_requested(self) -> None:
        """Stop the turns the console asked to stop (possibly in another replica), as read
        by this heartbeat's renewal: the turn of the requested event, as ``/stop`` in the
        thread stops it. A request for a turn that ended is cleared; one for a turn not
        started here yet waits for it."""
        c, leases = self.client, self.thread_leases
        for (channel, root), request in list(leases.stop_requests.items()):
            turn = self.router.active.get(thread_key(c.platform, c.workspace, channel, root))
            if turn is not None and turn.event_id == request.event_id:
                log.info("console.stop_applied", thread=root, event_id=request.event_id,
                         by=request.by)
                turn.cancel()
            elif turn is None or turn.event_id < request.event_id:
                continue  # not started here (yet): a later heartbeat stops it
            await leases.stop_handled(c.platform, c.workspace, (channel, root), request)

    async def take_over(self) -> None:
        c = self.client
        taken = await self.thread_leases.take_over(c.platform, c.workspace)
        if taken:
            log.info("thread_leases.taken_over", threads=len(taken))
            self.host.publish(ThreadsTakenOver(platform=c.platform, count=len(taken)))
            if self.metrics is not None:
                self.metrics.thread_takeovers.labels(platform=c.platform).inc(len(taken))
            await self.recover(taken)

    async def recover(self, threads: set[Thread]) -> None:
        """Finish what another run left in ``threads`` (whose leases this replica took)."""
        async with self.state.claiming:
            await self._recover(threads)

    async def _recover(self, threads: set[Thread]) -> None:
        c = self.client
        # claimed by the intake with their record and handed to the pump, which dispatches
        # them after this recovery (as it would have claimed them): not left over
        handed = {s.id for h in self.state.handed for s in h.batch}
        for stored in await self.inbound.unfinished(c.platform, c.workspace):
            if (stored.event.channel, stored.event.thread_root) not in threads:
                continue
            if stored.id in handed or stored.id in self.router.live:
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
            self.processor.submit(stored.event.thread_key, self.router.bind(
                self.turns.recover, stored, row, binding, order=stored.id, event=stored.id))
        for row in await self.outbox.open_rows(c.platform, c.workspace):
            if row.kind == "notice" and (row.target.channel, row.target.thread_root) in threads:
                self.router.spawn(self.deliverer.deliver(row))
        self.state.poke()

    def after_outage_soon(self) -> None:
        """:meth:`_after_outage` in a task of its own, one at a time: the pump and the lease
        keeper must not wait for a recovery (a lease keeper stuck behind one let this
        replica's leases expire, and another replica took over threads still running here)."""
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._after_outage(), name="channel-recover")
            self.router.track(self._sweeper)

    async def _after_outage(self) -> None:
        """A store operation of this layer failed on a lost connection: once the store
        answers, recover every thread this replica holds that has unfinished work and no
        live job (an event claimed by a commit whose answer was lost, a claimed event whose
        dispatch failed). Jobs that failed resume themselves (``Router.bind``)."""
        await self.records.wait_until_answers(what="channel.waiting_for_store")
        c = self.client
        try:
            held = await self.thread_leases.renew(c.platform, c.workspace)
            self.state.outage = False
            await self.recover(held)
        except Exception as exc:
            if not is_transient(exc):
                raise
            self.state.outage = True
            log_store_failure("channel.recover_failed", exc)
