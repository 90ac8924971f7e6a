"""The intake: records what the platform code hands in, and answers its reads.

It implements the :class:`bots.port.Intake` port (platform code sees the layer only
through it). Events are recorded durably before the platform is acknowledged; while the
pump runs and no pass holds the claiming lock, what is recorded is claimed in the record's
own transaction and handed to the pump (:mod:`bots.pump`). Only the intake (Telegram's
``getUpdates``, catch-up) is single, under the connector's bot lease. Part of
:class:`~bots.layer.ChannelLayer`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from bots.bindings import BindingTable
from bots.events import InboundEvent
from bots.options import LayerOptions
from bots.port import PlatformClient, TurnHost
from bots.pump import CLAIM_LIMIT, ClaimState, Handed, Pump
from bots.store import ChannelStore, Cursors
from geode.hooks.events import MessagesReceived
from geode.settings import BindingSettings
from geode.store._retry import is_transient

__all__ = ["Intake"]


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
        fault: Callable[[str], None],
    ) -> None:
        self.state = state
        self.pump = pump
        self.client = client
        self.host = host
        self.options = options
        self.bindings = bindings
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
        self.fault("recorded")
        if ids:
            self.host.publish(MessagesReceived(platform=self.client.platform, count=len(ids)))
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
            self.host.publish(MessagesReceived(platform=self.client.platform, count=len(ids)))
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
