"""Durable inbound: record first, acknowledge after.

Invariant: an event is committed to ``channel_events`` (unique ``dedupe_key``) in the same
transaction that moves the connector's cursor, and *before* the platform learns that it was
received (Telegram's next ``getUpdates`` offset, a webhook's 200). A crash before the commit
means the platform redelivers; a crash after it means the event is in the store and is
processed on restart; a redelivery of a recorded event is refused by the unique key. So an
event is never lost and never processed twice.

Status of an event: ``received`` (recorded, not looked at) -> ``processing`` (claimed by the
dispatcher) -> ``running`` (a turn was accepted for it; its outbox row exists) -> ``done``;
or ``ignored`` / ``expired`` (too old for catch-up) / ``failed``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import structlog
from sqlalchemy import and_, bindparam, select, update

from bots.events import InboundEvent
from bots.store._sql import insert_for, insert_ignore
from bots.store._tables import cursors_table, events_table, messages_table
from bots.store.leases import held_by_another, store_clock
from geode.secret_redaction import redact_values
from geode.store.models import utcnow

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection

    from bots.store.leases import ThreadLeases
    from geode.store.database import Database

__all__ = ["EVENTS_CHANNEL", "Cursors", "InboundLog", "StoredEvent"]

log = structlog.get_logger(__name__)


def _at_rest(event: InboundEvent) -> tuple[dict[str, Any], bool]:
    """The event as it is stored, and whether that is the event as given (nothing masked).

    Every text in it (the message, quoted context, a thread title in ``extra``...) is
    stored with credentials masked: a key a user pasted must not sit in clear in
    ``channel_events``. The turn reads the event back from here, so the model sees the mask
    too: a chat message is no way to hand GEODE a secret (that is ``.env`` / the
    environment). An event the mask left as it was is the event the store would read back:
    :meth:`InboundLog.record_and_claim` hands that one on instead of decoding its row."""
    given = event.to_json()
    stored = cast("dict[str, Any]", redact_values(given))
    return stored, stored == given


#: PostgreSQL: notified with ``platform:workspace origin`` when events of that bot are
#: recorded, so every other replica's pump wakes at once (threads it holds may have new events)
EVENTS_CHANNEL = "geode_channel_events"
_E = events_table
_C = cursors_table
_M = messages_table


@dataclass(frozen=True, kw_only=True)
class StoredEvent:
    id: int
    status: str
    event: InboundEvent
    session_id: str | None = None


def _stored(row: Any) -> StoredEvent:
    return StoredEvent(id=int(row.id), status=str(row.status),
                       event=InboundEvent.from_json(dict(row.payload)),
                       session_id=row.session_id)


def _cursor_upsert(store: Database, name: str, value: str) -> tuple[Any, dict[str, Any]]:
    """The statement that upserts a cursor (``ON CONFLICT (name) DO UPDATE``, both dialects)
    and its parameters: ``conn.execute(*upsert)``. A poller stores its cursor after every
    batch of updates; the statement is built once per dialect, not per batch."""
    return (_cursor_stmt(store.is_postgres),
            {"b_name": name, "b_value": value, "b_updated_at": utcnow()})


@functools.cache
def _cursor_stmt(postgres: bool) -> Any:
    stmt = insert_for(postgres)(_C).values(name=bindparam("b_name"), value=bindparam("b_value"),
                                        updated_at=bindparam("b_updated_at"))
    return stmt.on_conflict_do_update(
        index_elements=[_C.c.name],
        set_={"value": stmt.excluded.value, "updated_at": stmt.excluded.updated_at},
    )


# The pump's claim, built once (it runs for every batch of recorded events; building and
# cache-keying these costs about what SQLite takes to run them). SET columns come from the
# parameters: status, owner, updated_at.
_RECEIVED = and_(_E.c.platform == bindparam("b_platform"),
                 _E.c.workspace == bindparam("b_workspace"), _E.c.status == "received")
_CLAIM_OLDEST = (
    update(_E)
    .where(_E.c.id.in_(select(_E.c.id).where(_RECEIVED).order_by(_E.c.id)
                       .limit(bindparam("b_limit"))),
           _E.c.status == "received")
    .returning(*_E.c)
)
_CLAIM_IDS = (update(_E).where(_E.c.id.in_(bindparam("b_ids", expanding=True)),
                               _E.c.status == "received")
              .returning(*_E.c))
#: the same for one event (the usual claim): a statement without an expanding list, which
#: the store compiles once (``geode.store._sqlite_cursor``)
_CLAIM_ID = (update(_E).where(_E.c.id == bindparam("b_id"), _E.c.status == "received")
             .returning(*_E.c))


@functools.cache
def _candidates(postgres: bool) -> Any:
    """The received events of threads no other replica holds (``b_owner`` is this one),
    oldest first, each with the store's clock (``now``) for the leases taken."""
    return (select(_E.c.id, _E.c.channel, _E.c.thread_root, store_clock(postgres).label("now"))
            .where(_RECEIVED, ~held_by_another(_E))
            .order_by(_E.c.id).limit(bindparam("b_limit")))


class Cursors:
    """Named durable read positions (``channel_cursors``)."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    async def get(self, name: str) -> str | None:
        query = select(_C.c.value).where(_C.c.name == name)
        row = await self._store.run_read(lambda conn: conn.execute(query).first())
        return None if row is None else str(row.value)

    async def put(self, conn: AsyncConnection, name: str, value: str) -> None:
        """Upsert inside the caller's (async) transaction."""
        await conn.execute(*_cursor_upsert(self._store, name, value))

    async def set(self, name: str, value: str) -> None:
        """Upsert in a transaction of its own."""
        stmt = _cursor_upsert(self._store, name, value)
        await self._store.run_write(lambda conn: conn.execute(*stmt))

    async def watermark(self, prefix: str) -> int:
        """The highest numeric value of the cursors named ``prefix*`` (0 without one)."""
        query = select(_C.c.value).where(_C.c.name.like(f"{prefix}%"))
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return max((int(r.value) for r in rows if str(r.value).isdigit()), default=0)


class InboundLog:
    """The ``channel_events`` table.

    Every method is one transaction in one hop to the store's worker threads
    (:meth:`Database.run_write` / :meth:`Database.run_read`, SQLAlchemy Core on a sync
    connection): aiosqlite would hop once per statement, and the writer lock is held for
    the whole transaction, so hops inside it delay every other writer.
    """

    def __init__(self, *, store: Database, origin: str = "") -> None:
        self._store = store
        #: who records (a replica's owner name), named in the PostgreSQL notification
        self.origin = origin
        self.cursors = Cursors(store=store)
        #: the record's statements, built once for the store's dialect (not per record)
        self._insert_event = insert_ignore(store, _E, ["dedupe_key"], returning=["id"])
        self._insert_message = insert_ignore(store, _M, ["platform", "workspace", "channel",
                                                         "message_id"])

    async def record(
        self,
        events: Sequence[tuple[InboundEvent, str]],
        *,
        cursor: tuple[str, str] | None = None,
    ) -> list[int]:
        """Record ``(event, status)`` pairs and move ``cursor`` in one transaction.

        Returns the ids of the rows that were new (a duplicate key is skipped silently:
        that event was recorded before). Each message is also entered in the message
        index under its thread, so replies to it resolve to the same thread.
        """
        return await self._store.run_write(self._record_tx(events, cursor))

    async def record_and_claim(
        self,
        events: Sequence[tuple[InboundEvent, str]],
        *,
        cursor: tuple[str, str] | None = None,
        platform: str, workspace: str, owner: str, limit: int = 100,
        leases: ThreadLeases, new_threads: int = 1 << 30,
    ) -> tuple[list[int], list[StoredEvent]]:
        """:meth:`record` and then :meth:`claim_batch` in ONE transaction: what the pump
        would claim right after the record commits (the same rows by the same rules:
        oldest first, threads this replica holds or takes now), without a second
        transaction. Only when something new was recorded; otherwise nothing is claimed.

        A crash after the commit leaves the events claimed and undecided, as a crash
        between a record and the pump's claim would have a moment later: recovery
        decides them again (``ChannelLayer.recover``).

        Returns (new row ids, the claimed events oldest first). An event just recorded
        whose stored form is the event as given (nothing masked) is handed back as given,
        not decoded from its row again: the same value, no JSON read, no hop back into
        :mod:`bots.events` on a message's walk. A masked one is read back (the turn sees
        the mask), and so is every row recorded before.
        """
        as_given: dict[int, InboundEvent] = {}
        record = self._record_tx(events, cursor, as_given=as_given)
        claim = self._claim_tx(platform, workspace, owner=owner, limit=limit, leases=leases,
                               new_threads=new_threads)

        def tx(conn: Connection) -> tuple[list[int], list[Any]]:
            new_ids = record(conn)
            return new_ids, (claim(conn) if new_ids else [])

        new_ids, rows = await self._store.run_write(tx)
        return new_ids, [
            StoredEvent(id=int(r.id), status=str(r.status), event=as_given[int(r.id)],
                        session_id=r.session_id) if int(r.id) in as_given else _stored(r)
            for r in rows]

    def _record_tx(
        self, events: Sequence[tuple[InboundEvent, str]], cursor: tuple[str, str] | None,
        *, as_given: dict[int, InboundEvent] | None = None,
    ) -> Callable[[Connection], list[int]]:
        """The record's transaction; ``as_given`` (given) collects the new rows whose
        stored form is the event as given, by row id (see :func:`_at_rest`)."""
        store = self._store
        insert_event, insert_message = self._insert_event, self._insert_message
        cursor_stmt = _cursor_upsert(store, *cursor) if cursor is not None else None

        def tx(conn: Connection) -> list[int]:
            new_ids: list[int] = []
            for event, status in events:
                now = utcnow()
                payload, unmasked = _at_rest(event)
                inserted = conn.execute(insert_event, {
                    "dedupe_key": event.dedupe_key[:300], "platform": event.platform,
                    "workspace": event.workspace, "channel": event.channel,
                    "thread_root": event.thread_root, "message_id": event.message_id,
                    "sender": event.sender, "payload": payload, "status": status,
                    "decision": "", "session_id": None, "owner": "", "created_at": now,
                    "updated_at": now,
                }).first()
                if inserted is None:  # ON CONFLICT DO NOTHING returns no row
                    log.debug("inbound.duplicate", key=event.dedupe_key)
                    continue
                new_ids.append(int(inserted.id))
                if as_given is not None and unmasked:
                    as_given[int(inserted.id)] = event
                if event.message_id and not event.is_edit:
                    conn.execute(insert_message, {
                        "platform": event.platform, "workspace": event.workspace,
                        "channel": event.channel, "message_id": event.message_id,
                        "thread_root": event.thread_root, "from_bot": False, "created_at": now,
                    })
            if cursor_stmt is not None:
                conn.execute(*cursor_stmt)
            if new_ids and store.is_postgres:  # delivered at commit, to every replica
                for bot in sorted({f"{ev.platform}:{ev.workspace}" for ev, _ in events}):
                    conn.execute(store.notify_stmt(EVENTS_CHANNEL, f"{bot} {self.origin}"))
            return new_ids

        return tx

    async def received(
        self, platform: str, workspace: str, *, limit: int = 100
    ) -> list[StoredEvent]:
        """Recorded events nobody looked at yet, oldest first."""
        query = select(_E).where(
            _E.c.platform == platform, _E.c.workspace == workspace, _E.c.status == "received",
        ).order_by(_E.c.id).limit(limit)
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return [_stored(r) for r in rows]

    async def claim_batch(
        self, platform: str, workspace: str, *, owner: str, limit: int = 100,
        leases: ThreadLeases | None = None, new_threads: int = 1 << 30,
    ) -> list[StoredEvent]:
        """Claim (received -> processing) up to ``limit`` recorded events, oldest first.

        The pump's form of the dedupe step: one transaction claims a whole batch, and only
        the rows this call moved are returned (a concurrent claimer gets the others), so
        every later decision on them is recorded exactly once.

        With ``leases`` (the layer's pump), only events of threads whose lease this replica
        holds, or takes in the same transaction (at most ``new_threads`` free ones, oldest
        first), are claimed; the others stay ``received`` for their holder. Without: every
        event qualifies (one processor).
        """
        tx = self._claim_tx(platform, workspace, owner=owner, limit=limit, leases=leases,
                            new_threads=new_threads)
        return [_stored(r) for r in await self._store.run_write(tx)]

    def _claim_tx(
        self, platform: str, workspace: str, *, owner: str, limit: int,
        leases: ThreadLeases | None, new_threads: int,
    ) -> Callable[[Connection], list[Any]]:
        """:meth:`claim_batch`'s transaction body (the claimed rows, oldest first)."""
        params: dict[str, Any] = {
            "b_platform": platform, "b_workspace": workspace, "b_owner": owner,
            "b_limit": limit, "status": "processing", "owner": owner, "updated_at": utcnow(),
        }
        if leases is None:
            # One statement: the oldest unclaimed ids, re-checked by the UPDATE itself (a
            # concurrent claimer's rows no longer match), the claimed rows returned.
            def tx(conn: Connection) -> list[Any]:
                return sorted(conn.execute(_CLAIM_OLDEST, params).all(), key=lambda r: int(r.id))
        else:
            # Not another replica's threads: their backlog must not hide free threads'
            # events from this replica (it would starve behind the window). The store's
            # clock comes with the rows, for the leases taken.
            candidates = _candidates(self._store.is_postgres)

            def tx(conn: Connection) -> list[Any]:
                rows = conn.execute(candidates, params).all()
                if not rows:
                    return []
                held = leases.take_in(conn, platform, workspace,
                                      [(r.channel, r.thread_root) for r in rows],
                                      new=new_threads, now=int(rows[0].now))
                ids = [r.id for r in rows if (r.channel, r.thread_root) in held]
                if not ids:
                    return []
                if len(ids) == 1:
                    claimed = conn.execute(_CLAIM_ID, {**params, "b_id": ids[0]}).all()
                else:
                    claimed = conn.execute(_CLAIM_IDS, {**params, "b_ids": ids}).all()
                return sorted(claimed, key=lambda r: int(r.id))

        return tx

    async def release(self, event_ids: Sequence[int]) -> None:
        """Hand claimed, still undecided events back (processing -> received)."""
        if not event_ids:
            return
        stmt = (update(_E).where(_E.c.id.in_(list(event_ids)), _E.c.status == "processing")
                .values(status="received", owner="", updated_at=utcnow()))
        await self._store.run_write(lambda conn: conn.execute(stmt))

    async def unfinished(self, platform: str, workspace: str) -> list[StoredEvent]:
        """Events claimed by a previous run that did not finish (recovery after a crash)."""
        query = select(_E).where(
            _E.c.platform == platform, _E.c.workspace == workspace,
            _E.c.status.in_(("processing", "running")),
        ).order_by(_E.c.id)
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return [_stored(r) for r in rows]

    async def claim(self, event_id: int, *, owner: str) -> bool:
        """received -> processing; False if somebody else claimed it (the dedupe step)."""
        stmt = (update(_E).where(_E.c.id == event_id, _E.c.status == "received")
                .values(status="processing", owner=owner, updated_at=utcnow()))
        return await self._store.run_write(lambda conn: bool(conn.execute(stmt).rowcount))

    async def set_status(
        self, event_id: int, status: str, *, decision: str | None = None,
        session_id: str | None = None,
    ) -> None:
        values: dict[str, Any] = {"status": status, "updated_at": utcnow()}
        if decision is not None:
            values["decision"] = decision[:64]
        if session_id is not None:
            values["session_id"] = session_id
        stmt = update(_E).where(_E.c.id == event_id).values(**values)
        await self._store.run_write(lambda conn: conn.execute(stmt))

    async def get(self, event_id: int) -> StoredEvent | None:
        query = select(_E).where(_E.c.id == event_id)
        row = await self._store.run_read(lambda conn: conn.execute(query).first())
        return None if row is None else _stored(row)

    async def known_keys(self, dedupe_keys: Sequence[str]) -> set[str]:
        """Which of ``dedupe_keys`` are recorded already."""
        if not dedupe_keys:
            return set()
        query = select(_E.c.dedupe_key).where(_E.c.dedupe_key.in_(list(dedupe_keys)))
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return {str(r.dedupe_key) for r in rows}

    async def thread_history(
        self, event: InboundEvent, *, before_id: int, limit: int = 50
    ) -> list[InboundEvent]:
        """Earlier recorded messages of the event's thread (oldest first)."""
        query = select(_E.c.payload).where(
            _E.c.platform == event.platform, _E.c.workspace == event.workspace,
            _E.c.channel == event.channel, _E.c.thread_root == event.thread_root,
            _E.c.id < before_id,
        ).order_by(_E.c.id.desc()).limit(limit)
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return [InboundEvent.from_json(dict(r.payload)) for r in reversed(rows)]
