"""The channel queue as an operator sees it: accepted turns still waiting for their lanes.

A channel turn is accepted with its event's decision ``turn.queued`` and a ``pending`` outbox
row. When the daemon gives it its lanes it *claims* it (decision ``turn.queued`` -> ``turn``,
one conditional UPDATE); ``geode queue drop`` takes the same row the other way (->
``turn.dropped``) and, in the same transaction, records the thread's notice as the row's
final answer (``pending`` -> ``ready``). Both are conditional updates of one row, so on
SQLite and PostgreSQL alike exactly one of them wins: a dropped message never runs, and a
message that started is never dropped. The daemon that finds its claim refused delivers the
notice (on a stopped daemon, the next start's recovery does), once, through the outbox.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import and_, bindparam, select, update

from bots.format import Chunk
from bots.store._tables import events_table, outbox_table
from bots.store.outbox import Outbox
from geode.store.models import utcnow

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = ["DROPPED_NOTICE", "QUEUED_DECISION", "ChannelQueue", "QueuedMessage"]

_E = events_table
_O = outbox_table
DROPPED_NOTICE = "⏹ An operator removed your queued message; it was not run."
QUEUED_DECISION = "turn.queued"
_ACCEPTED, _RUNNING, _DROPPED = QUEUED_DECISION, "turn", "turn.dropped"
# The daemon's claim (one per channel turn), built once: SET columns come from the
# parameters (``decision``, ``updated_at``), the row from ``b_id``.
_CLAIM = update(_E).where(_E.c.id == bindparam("b_id"), _E.c.decision == _ACCEPTED)
_DECISION = select(_E.c.decision).where(_E.c.id == bindparam("b_id"))


@dataclass(frozen=True, kw_only=True)
class QueuedMessage:
    #: the inbound event id (``geode queue drop`` takes it)
    id: int
    platform: str
    workspace: str
    channel: str
    thread: str
    sender: str
    #: 1 = the next to get a lane
    position: int
    received_at: datetime


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=UTC)


class ChannelQueue:
    """Queued channel turns: listed and dropped by the operator, claimed by the daemon."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    async def list(self) -> list[QueuedMessage]:
        """Accepted turns not yet given their lanes, in the order they get them."""
        query = (select(_E.c.id, _E.c.platform, _E.c.workspace, _E.c.channel,
                        _E.c.thread_root, _E.c.sender, _E.c.created_at)
                 .join(_O, and_(_O.c.event_id == _E.c.id, _O.c.kind == "turn"))
                 .where(_E.c.decision == _ACCEPTED, _E.c.status == "running",
                        _O.c.status == "pending")
                 .order_by(_E.c.id))
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return [QueuedMessage(id=int(r.id), platform=r.platform, workspace=r.workspace,
                              channel=r.channel, thread=r.thread_root, sender=r.sender,
                              position=n, received_at=_aware(r.created_at))
                for n, r in enumerate(rows, start=1)]

    async def drop(self, event_id: int) -> bool:
        """End a queued message unanswered: its reply becomes the notice (delivered by the
        daemon when the message would have got its lanes, or by the next start's recovery).
        False when it is not queued (unknown, already running, answered or dropped)."""
        chunks = [Chunk(formatted=DROPPED_NOTICE, fallback=DROPPED_NOTICE)]

        def tx(conn: Connection) -> bool:
            row = conn.execute(select(_O.c.id).where(
                _O.c.event_id == event_id, _O.c.kind == "turn", _O.c.status == "pending",
            )).first()
            if row is None:
                return False
            taken = conn.execute(update(_E).where(
                _E.c.id == event_id, _E.c.decision == _ACCEPTED, _E.c.status == "running",
            ).values(decision=_DROPPED, updated_at=utcnow()))
            if taken.rowcount != 1:
                return False
            stmt = Outbox.update_stmt(int(row.id), {"status": "ready", "chunks": chunks})
            done = conn.execute(update(_O).where(_O.c.id == int(row.id),
                                                 _O.c.status == "pending"), stmt[1])
            if done.rowcount != 1:
                raise _Lost  # answered meanwhile: undo the claim with the transaction
            return True

        try:
            return bool(await self._store.run_write(tx))
        except _Lost:
            return False

    async def claim(self, event_id: int) -> bool:
        """The daemon gives the turn its lanes: False if the operator dropped it (it must
        not run). A turn claimed before (resumed after a restart) stays claimed."""
        params = {"b_id": event_id, "decision": _RUNNING, "updated_at": utcnow()}

        def tx(conn: Connection) -> bool:
            if conn.execute(_CLAIM, params).rowcount == 1:
                return True
            # claimed before (a resumed turn, one accepted by an older version): only a drop
            # stops it
            return bool(conn.execute(_DECISION, {"b_id": event_id}).scalar() != _DROPPED)

        return bool(await self._store.run_write(tx))


class _Lost(Exception):
    pass
