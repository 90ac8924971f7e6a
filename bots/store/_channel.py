"""ChannelStore: the channel records of one connector, built on the harness's store."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection
from typing import TYPE_CHECKING, TypeAlias

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from bots.events import InboundEvent
from bots.store.approvals import ApprovalRequests
from bots.store.attachments import AttachmentRecords
from bots.store.bindings import StoredBindings
from bots.store.inbound import InboundLog
from bots.store.leases import Lease, ThreadLeases
from bots.store.outbox import Outbox, OutboxRow
from bots.store.pairing import PairingStore
from bots.store.queue import ChannelQueue
from bots.store.threads import MessageIndex, ThreadSessions, ThreadState
from geode.store._retry import wait_until_answers

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = ["ChannelStore", "Tx"]

#: an open write transaction of the store, held by a caller that groups several named
#: operations in one unit of work (e.g. a pairing code and the notice that carries it)
Tx: TypeAlias = AsyncConnection


class ChannelStore:
    """Every channel record of one replica's connector, and the units of work that span
    several tables.

    Args:
        store: the harness's store (the channel tables live in the same database).
        owner: this replica's connector instance name (leases, claims, notifications).
        lease_ttl_s: thread leases last this long unless renewed.
        pairing_max_new_per_hour: the platform's cap on new pairing codes.
        predecessors: lease holders known dead (this home's crashed process, see
            :mod:`bots.holders`): their leases are taken over at once, not after the TTL.
    """

    def __init__(
        self, *, store: Database, owner: str, lease_ttl_s: float,
        pairing_max_new_per_hour: int = 20, predecessors: Collection[str] = (),
    ) -> None:
        self._store = store
        self.owner = owner
        self.inbound = InboundLog(store=store, origin=owner)
        self.cursors = self.inbound.cursors
        self.threads = ThreadSessions(store=store)
        self.index = MessageIndex(store=store)
        self.outbox = Outbox(store=store, index=self.index)
        self.pairing = PairingStore(store=store, max_new_per_hour=pairing_max_new_per_hour)
        self.bindings = StoredBindings(store=store)
        self.approvals = ApprovalRequests(store=store)
        self.attachments = AttachmentRecords(store=store)
        self.queue = ChannelQueue(store=store)
        self.predecessors = frozenset(predecessors)
        self.thread_leases = ThreadLeases(store=store, owner=owner, ttl_s=lease_ttl_s,
                                          predecessors=self.predecessors)

    @property
    def is_postgres(self) -> bool:
        return self._store.is_postgres

    def notifications(self, channel: str) -> AsyncIterator[str]:
        """PostgreSQL LISTEN on ``channel`` (the other replicas' recorded events)."""
        return self._store.notifications(channel)

    async def wait_until_answers(self, *, what: str) -> None:
        """Until the store runs a query again (after a lost connection; logs ``what``)."""
        await wait_until_answers(self._store, what=what)

    def lease(self, *, name: str, ttl_s: float) -> Lease:
        """A named lease of this owner (the bot's intake lease)."""
        return Lease(store=self._store, name=name, owner=self.owner, ttl_s=ttl_s,
                     predecessors=self.predecessors)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        """One write transaction for several operations that take a ``conn``."""
        async with self._store.write() as conn:
            yield conn

    async def accept_turn(
        self, event: InboundEvent, *, event_id: int, thread: ThreadState | None
    ) -> OutboxRow | None:
        """Engage the event's thread (unless ``thread`` is known) and accept its turn (a
        ``pending`` outbox row, the event ``running``), in ONE transaction (one writer-lock
        hold). None when the turn was accepted before (recovery owns it)."""

        def accept(conn: Connection) -> OutboxRow:
            state = thread or self.threads.engage_in(conn, event)
            return self.outbox.open_turn_in(
                conn, event_id=event_id, session_id=state.session_id,
                turn_key=f"ev{event_id}", platform=event.platform, workspace=event.workspace,
                target=event.target(),
            )

        try:
            return await self._store.run_write(accept)
        except IntegrityError:
            return None
