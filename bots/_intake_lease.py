"""The intake lease every connector holds: one replica takes a platform's updates (polls,
catches up) while the others wait as standbys; processing is not tied to it (each replica
processes the threads it holds). A mixin of :class:`~bots.connector.BaseConnector`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, ClassVar

import structlog

from bots._aio import reap
from geode.daemon.supervisor import Backoff, Component, TaskSupervisor, describe_error

if TYPE_CHECKING:
    from bots.store import ChannelStore, Lease

__all__ = ["INTAKE_BACKOFF", "IntakeLeaseHolder"]

log = structlog.get_logger(__name__)

#: the intake lease / intake restarts after a store or intake failure: 0.5 s ... 30 s
INTAKE_BACKOFF = Backoff(initial_s=0.5, max_s=30.0)


class IntakeLeaseHolder:
    """Holds the platform's intake lease and runs the intake while it is held (see the
    module docstring); the connector sets the attributes below."""

    platform: ClassVar[str]
    workspace: str
    records: ChannelStore | None
    supervisor: TaskSupervisor
    #: the intake's health (registered by :meth:`start_supervisor`)
    intake_health: Component
    #: the bot's intake lease (set in the connector's ``connect``)
    lease: Lease | None
    #: True while another replica holds :attr:`lease` and this one waits for the intake
    standby: bool

    if TYPE_CHECKING:
        async def catch_up(self) -> None: ...

    def start_supervisor(
        self, *, lease_name: str, ttl_s: float, work: Callable[[], Awaitable[None]] | None = None,
        stale_after_s: float | None = None,
    ) -> asyncio.Task[None]:
        """Create :attr:`lease` (store lease ``lease_name``) and run :meth:`supervise` on it,
        under this connector's :attr:`supervisor` as ``<platform>.intake``.

        ``stale_after_s``: the intake is reported stalled on ``/readyz`` after this long
        without progress (``work`` beats :attr:`intake_health` as it makes progress, e.g.
        each ``getUpdates`` answered; default: two lease TTLs).
        """
        assert self.records is not None
        self.lease = self.records.lease(name=lease_name, ttl_s=ttl_s)
        period = max(0.05, ttl_s / 3)
        name = f"{self.platform}.intake"
        self.intake_health = self.supervisor.spawn(
            name, lambda comp: self.supervise(period=period, work=work),
            stale_after_s=stale_after_s if stale_after_s is not None else 2 * ttl_s)
        task = self.supervisor.task(name)
        assert task is not None
        return task

    async def supervise(
        self, *, period: float, work: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Hold :attr:`lease` (or wait as a standby for it); while held, run the intake.

        The intake is :meth:`catch_up`, then ``work`` (e.g. Telegram's ``getUpdates`` loop),
        in one task while the lease is renewed every ``period`` seconds. Losing the lease
        cancels that task: only the holder may poll. A failure ends it too, and it starts
        again after a backoff. Processing is not tied to this lease (every replica
        processes the threads it holds).

        A store error never ends this loop (a PostgreSQL restart used to end it for good,
        silently: no replica polled again): it is logged, shown on ``/readyz``, and the
        lease is tried again. While held, a renewal that keeps failing stops the intake
        once the lease may have expired (another replica may hold it by then).
        """
        assert self.lease is not None
        health = self.intake_health
        failures = 0
        while True:
            try:
                acquired = await self.lease.try_acquire()
            except Exception as exc:
                failures += 1
                delay = INTAKE_BACKOFF.delay(failures)
                health.down(f"cannot take or renew the intake lease: {describe_error(exc)} "
                            f"(retrying in {delay:.1f}s)")
                log.warning("connector.lease_failed", platform=self.platform,
                            error_class=type(exc).__name__, retry_in_s=round(delay, 2),
                            exc_info=exc)
                await asyncio.sleep(delay)
                continue
            failures = 0
            if not acquired:
                if not self.standby:
                    log.info("connector.standby", platform=self.platform,
                             holder=await self._holder())
                self.standby = True
                health.beat("standby (another replica holds the intake)")
                await asyncio.sleep(period)
                continue
            self.standby = False
            log.info("connector.lease_acquired", platform=self.platform,
                     workspace=self.workspace)
            if work is None:
                health.beat("holding the intake")
            failed = await self._hold(work, period=period)
            if failed is not None:
                failures += 1
                delay = INTAKE_BACKOFF.delay(failures)
                health.down(f"intake failed: {describe_error(failed)} "
                            f"(restarting in {delay:.1f}s)")
                log.error("connector.intake_failed", platform=self.platform,
                          error_class=type(failed).__name__, retry_in_s=round(delay, 2),
                          exc_info=failed)
                await asyncio.sleep(delay)

    async def _hold(
        self, work: Callable[[], Awaitable[None]] | None, *, period: float
    ) -> Exception | None:
        """Run the intake while the lease is renewed; what it failed with (None: the lease
        was lost or could not be renewed for its TTL)."""
        assert self.lease is not None
        ttl = self.lease.ttl_ms / 1000
        task = asyncio.create_task(self._intake_work(work), name=f"{self.platform}-intake")
        renewed = time.monotonic()
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=period)
                if task.done():
                    break
                # renewed well before expiry (period is a third of the TTL)
                try:
                    held = await self.lease.try_acquire()
                except Exception as exc:
                    log.warning("connector.lease_renew_failed", platform=self.platform,
                                error_class=type(exc).__name__, exc_info=exc)
                    if time.monotonic() - renewed < ttl:
                        continue  # still ours until the TTL: keep polling meanwhile
                    log.warning("connector.lease_expired", platform=self.platform)
                    self.intake_health.down(f"intake lease not renewed for {ttl:.0f}s: "
                                            f"{describe_error(exc)}")
                    return None
                if not held:
                    log.warning("connector.lease_lost", platform=self.platform,
                                workspace=self.workspace)
                    return None
                renewed = time.monotonic()
                if work is None:
                    self.intake_health.beat("holding the intake")
        finally:
            failed = task.done() and not task.cancelled() and task.exception() is not None
            await reap(task)
        if failed:
            error = task.exception()
            return error if isinstance(error, Exception) else RuntimeError(repr(error))
        if task.done() and not task.cancelled():
            return RuntimeError("the intake returned (it must run until cancelled)")
        return None

    async def _holder(self) -> str | None:
        assert self.lease is not None
        try:
            held = await self.lease.holder()
        except Exception:
            return None
        return None if held is None else held[0]

    async def _intake_work(self, work: Callable[[], Awaitable[None]] | None) -> None:
        self.intake_health.beat("catching up")
        await self.catch_up()
        if work is not None:
            await work()
        else:
            await asyncio.Event().wait()  # hold the lease (catch-up is done once per hold)
