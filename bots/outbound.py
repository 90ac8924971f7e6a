"""Durable outbound: one visible final reply per inbound message.

Each reply owed is a ``channel_outbox`` row keyed by (session, turn), written *before*
anything is sent. A turn's row records its progress message id as soon as that message
exists; the final answer is then delivered by **editing** recorded messages (the progress
message for the first chunk, recorded placeholders for the rest). An edit is idempotent
("message is not modified" means it is already there), so after a crash the deliverer just
runs again: a reply whose send outcome is unknown is reconciled through the recorded
message id, never re-sent blindly.

Short notices (pairing codes, command answers) have no progress message: their row is
marked ``sending`` before the single send; a crash inside that window leaves the row
``uncertain`` and it is not re-sent (at most once; the Bot API cannot read history to check).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog
from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from bots._tables import events_table, outbox_table
from bots.connector import BaseConnector, DeliveryError
from bots.events import ReplyTarget
from bots.format import Chunk
from bots.leases import ThreadLeaseLost
from bots.sessions import MessageIndex
from geode.store.models import utcnow

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection

    from geode.store import Store

__all__ = ["PLACEHOLDER", "Deliverer", "Outbox", "OutboxRow"]

log = structlog.get_logger(__name__)
_O = outbox_table
_E = events_table
PLACEHOLDER = "…"

# Built once (the hot path runs several per reply; building a statement costs more than
# executing it): a statement with its parameters is a ``_Stmt``.
_INSERT = insert(_O)
_UPDATE = update(_O).where(_O.c.id == bindparam("b_id"))
_UPDATE_RETURNING = _UPDATE.returning(*_O.c)  # the row as updated (SQLite 3.35+, PostgreSQL)
#: pending -> ready only: the first run to finish a turn delivers it
_READY = (update(_O).where(_O.c.id == bindparam("b_id"), _O.c.status == "pending")
          .returning(*_O.c))
_BY_ID = select(_O).where(_O.c.id == bindparam("b_id"))
_UPDATE_EVENT = update(_E).where(_E.c.id == bindparam("b_id"))
_EVENT_RECEIVED = select(_E.c.created_at).where(_E.c.id == bindparam("b_id"))
_Stmt = tuple[Any, dict[str, Any]]


def _event_update(event_id: int, **values: Any) -> _Stmt:
    return _UPDATE_EVENT, {**values, "updated_at": utcnow(), "b_id": event_id}


@dataclass(frozen=True, kw_only=True)
class OutboxRow:
    id: int
    session_key: str
    turn_key: str
    event_id: int | None
    kind: str
    platform: str
    workspace: str
    target: ReplyTarget
    status: str
    loop_turn_id: str
    progress_message_id: str | None
    progress_state: str
    message_ids: list[str]
    chunks: list[Chunk]
    edited: int
    attempts: int


def _rate_limited(exc: DeliveryError) -> bool:
    """A platform's rate-limit answer (429 with Retry-After), as every connector maps it."""
    return exc.kind == "retry" and exc.retry_after is not None


def _row(r: Any) -> OutboxRow:
    return OutboxRow(
        id=int(r.id), session_key=r.session_key, turn_key=r.turn_key, event_id=r.event_id,
        kind=r.kind, platform=r.platform, workspace=r.workspace,
        target=ReplyTarget.from_json(dict(r.target)), status=r.status,
        loop_turn_id=r.loop_turn_id, progress_message_id=r.progress_message_id,
        progress_state=r.progress_state, message_ids=[str(m) for m in r.message_ids or []],
        chunks=[Chunk(html=c["html"], plain=c["plain"]) for c in r.chunks or []],
        edited=int(r.edited), attempts=int(r.attempts),
    )


def _chunks_json(chunks: list[Chunk]) -> list[dict[str, str]]:
    return [{"html": c.html, "plain": c.plain} for c in chunks]


class Outbox:
    """The ``channel_outbox`` table.

    Each method is one transaction in one hop to the store's worker threads
    (:meth:`Store.run_write` / :meth:`Store.run_read`, SQLAlchemy Core on a sync
    connection); the ``*_in`` forms run inside a caller's sync transaction.
    """

    def __init__(self, *, store: Store) -> None:
        self._store = store

    @staticmethod
    def _insert_stmt(
        *, session_key: str, turn_key: str, event_id: int | None, kind: str, platform: str,
        workspace: str, target: ReplyTarget, status: str, chunks: list[Chunk],
        loop_turn_id: str = "",
    ) -> _Stmt:
        now = utcnow()
        return _INSERT, {
            "session_key": session_key, "turn_key": turn_key, "event_id": event_id, "kind": kind,
            "platform": platform, "workspace": workspace, "channel": target.channel,
            "thread_root": target.thread_root, "target": target.to_json(), "status": status,
            "loop_turn_id": loop_turn_id, "progress_message_id": None, "progress_state": "",
            "message_ids": [], "chunks": _chunks_json(chunks),
            "edited": 0, "attempts": 0, "error": "", "created_at": now, "updated_at": now,
        }

    def open_turn_in(
        self, conn: Connection, *, event_id: int, session_id: str, turn_key: str,
        platform: str, workspace: str, target: ReplyTarget,
    ) -> OutboxRow:
        """Accept a turn inside the caller's write transaction: its ``pending`` outbox row
        (with the id the loop turn will run under, so a restart can find that turn in the
        checkpoint chain) and the event's ``running`` status.

        Raises:
            IntegrityError: the row existed already; the caller's transaction is void.
        """
        loop_turn_id = f"t-{secrets.token_hex(6)}"
        result = conn.execute(*self._insert_stmt(
            session_key=session_id, turn_key=turn_key, event_id=event_id, kind="turn",
            platform=platform, workspace=workspace, target=target, status="pending",
            chunks=[], loop_turn_id=loop_turn_id,
        ))
        conn.execute(*_event_update(event_id, status="running", decision="turn",
                                    session_id=session_id))
        pk = result.inserted_primary_key
        assert pk is not None
        return OutboxRow(
            id=int(pk[0]), session_key=session_id, turn_key=turn_key,
            event_id=event_id, kind="turn", platform=platform, workspace=workspace,
            target=target, status="pending", loop_turn_id=loop_turn_id, progress_message_id=None,
            progress_state="", message_ids=[], chunks=[], edited=0, attempts=0,
        )

    async def open_turn(
        self, *, event_id: int, session_id: str, turn_key: str, platform: str,
        workspace: str, target: ReplyTarget,
    ) -> OutboxRow | None:
        """Accept a turn: its outbox row and the event's ``running`` status, atomically.

        Returns None if the row existed already (the turn was accepted before a restart).
        """
        try:
            return await self._store.run_write(lambda conn: self.open_turn_in(
                conn, event_id=event_id, session_id=session_id, turn_key=turn_key,
                platform=platform, workspace=workspace, target=target))
        except IntegrityError:
            return None

    async def add_notice(
        self, *, session_key: str, turn_key: str, event_id: int | None, platform: str,
        workspace: str, target: ReplyTarget, chunks: list[Chunk], event_status: str = "done",
        decision: str = "", conn: AsyncConnection | None = None,
    ) -> bool:
        """Queue a notice (and finish its event) atomically; False if it was queued before."""
        stmts = [self._insert_stmt(
            session_key=session_key, turn_key=turn_key, event_id=event_id, kind="notice",
            platform=platform, workspace=workspace, target=target, status="ready",
            chunks=chunks,
        )]
        if event_id is not None:
            stmts.append(_event_update(event_id, status=event_status, decision=decision[:64]))

        def tx(c: Connection) -> None:
            for stmt in stmts:
                c.execute(*stmt)

        try:
            if conn is not None:
                # Inside the caller's transaction: a duplicate must fail that whole
                # transaction, so no savepoint here.
                for stmt in stmts:
                    await conn.execute(*stmt)
            else:
                await self._store.run_write(tx)
        except IntegrityError:
            return False
        return True

    async def _one(self, query: Any) -> OutboxRow | None:
        r = await self._store.run_read(lambda conn: conn.execute(query).first())
        return None if r is None else _row(r)

    async def get(self, session_key: str, turn_key: str) -> OutboxRow | None:
        return await self._one(
            select(_O).where(_O.c.session_key == session_key, _O.c.turn_key == turn_key))

    async def by_id(self, row_id: int) -> OutboxRow:
        r = await self._store.run_read(lambda conn: conn.execute(_BY_ID, {"b_id": row_id})
                                       .first())
        assert r is not None
        return _row(r)

    async def for_event(self, event_id: int) -> OutboxRow | None:
        return await self._one(select(_O).where(_O.c.event_id == event_id))

    async def open_rows(self, platform: str, workspace: str) -> list[OutboxRow]:
        """Rows not finished: ready to deliver, notices caught mid-send."""
        query = select(_O).where(
            _O.c.platform == platform, _O.c.workspace == workspace,
            _O.c.status.in_(("ready", "sending")),
        ).order_by(_O.c.id)
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return [_row(r) for r in rows]

    async def run_write(self, fn: Callable[[Connection], Any]) -> Any:
        """One write transaction of the caller's (``*_in`` helpers, :meth:`update_stmt`)."""
        return await self._store.run_write(fn)

    @staticmethod
    def update_stmt(row_id: int, values: dict[str, Any]) -> _Stmt:
        """The UPDATE of one row's columns (``updated_at`` set) with its parameters, for a
        caller's transaction: ``conn.execute(*stmt)``."""
        values = dict(values)
        if "chunks" in values:
            values["chunks"] = _chunks_json(values["chunks"])
        values["updated_at"] = utcnow()
        values["b_id"] = row_id
        return _UPDATE, values

    async def update(self, row_id: int, **values: Any) -> None:
        stmt = self.update_stmt(row_id, values)
        await self._store.run_write(lambda conn: conn.execute(*stmt))

    async def mark_ready(
        self, row_id: int, chunks: list[Chunk], *,
        fence: Callable[[Connection], None] | None = None,
    ) -> OutboxRow | None:
        """Record a turn's final answer (pending -> ready); the row as committed, or None
        when the row is no longer pending: another run of the turn (a replica that took
        the thread over meanwhile) recorded its answer first, and delivers that one.

        ``fence`` runs first in the same transaction; if it raises ``ThreadLeaseLost``
        (another replica holds the thread now, and its run of the turn is the one that
        counts) nothing is recorded and None is returned.
        """
        stmt = self.update_stmt(row_id, {"status": "ready", "chunks": chunks})

        def tx(conn: Connection) -> Any:
            if fence is not None:
                try:
                    fence(conn)
                except ThreadLeaseLost as exc:
                    log.warning("outbox.ready_fenced", row=row_id, reason=str(exc))
                    return None
            return conn.execute(_READY, stmt[1]).first()

        r = await self._store.run_write(tx)
        return None if r is None else _row(r)

    async def finish(
        self, row: OutboxRow, *, status: str, error: str = "",
        values: dict[str, Any] | None = None,
        also: Callable[[Connection], None] | None = None,
    ) -> OutboxRow:
        """Mark the row (and its event) finished, in one transaction; returns the row.

        ``values`` are more columns to set in the same update (the delivered message ids);
        ``also`` runs inside the same transaction (the message index entries).
        """
        stmt = self.update_stmt(row.id, {**(values or {}), "status": status,
                                         "error": error[:2000]})
        event_stmt = None
        if row.event_id is not None and row.kind == "turn":
            event_stmt = _event_update(row.event_id,
                                       status="done" if status == "sent" else "failed")

        def tx(conn: Connection) -> Any:
            updated = conn.execute(_UPDATE_RETURNING, stmt[1]).first()
            if event_stmt is not None:
                conn.execute(*event_stmt)
            if also is not None:
                also(conn)  # the message index only: ``updated`` stays the row as committed
            return updated

        return _row(await self._store.run_write(tx))


class Deliverer:
    """Sends outbox rows through a connector, reconcilably."""

    def __init__(
        self, *, connector: BaseConnector, outbox: Outbox, index: MessageIndex,
        fault: Any = None, max_attempts: int = 5,
        observe: Callable[..., None] | None = None,
    ) -> None:
        """``observe(event, **data)``: the daemon's metrics (``channel.reply_sent`` with the
        latency from intake, ``channel.delivery_retried``, ``channel.rate_limited``)."""
        self.connector = connector
        self.outbox = outbox
        self.index = index
        self._fault = fault or (lambda point: None)
        self.max_attempts = max_attempts
        self._observe = observe or (lambda event, **data: None)

    async def deliver(self, row: OutboxRow) -> OutboxRow:
        """Deliver a ``ready`` row (idempotent: safe to call again after any crash)."""
        if row.status == "sent":
            return row
        if row.kind == "notice":
            return await self._notice(row)
        return await self._turn(row)

    async def _notice(self, row: OutboxRow) -> OutboxRow:
        if row.status == "sending":
            # Crashed inside the send window: it may be visible already. Never re-send.
            log.warning("outbox.notice_uncertain", row=row.id)
            return await self.outbox.finish(row, status="uncertain",
                                            error="send outcome unknown")
        await self.outbox.update(row.id, status="sending")
        ids: list[str] = []
        try:
            for chunk in row.chunks:
                ids.append(await self._send_chunk(row.target, chunk))
        except DeliveryError as exc:
            if _rate_limited(exc):
                self._observe("channel.rate_limited")
            status = "uncertain" if exc.kind == "unknown" else "failed"
            return await self.outbox.finish(row, status=status, error=str(exc),
                                            values={"message_ids": ids})
        self._fault("notice_sent_before_record")
        return await self._sent(row, ids)

    async def _send_chunk(self, target: ReplyTarget, chunk: Chunk) -> str:
        try:
            return await self.connector.send(target, chunk)
        except DeliveryError as exc:
            if exc.kind != "markup":
                raise
            log.info("outbox.markup_rejected_plain_fallback")
            return await self.connector.send(target, chunk, plain=True)

    async def _edit_chunk(self, target: ReplyTarget, message_id: str, chunk: Chunk) -> str:
        """Edit, falling back to plain text; returns the id now holding the chunk."""
        for plain in (False, True):
            try:
                await self.connector.edit(target, message_id, chunk, plain=plain)
                return message_id
            except DeliveryError as exc:
                if exc.kind == "not_modified":
                    return message_id  # already there: the reconciliation case
                if exc.kind == "markup" and not plain:
                    continue
                if exc.kind == "not_found":
                    # The message was deleted (by a person): nothing to duplicate, send anew.
                    return await self._send_chunk(target, chunk)
                raise
        raise AssertionError("unreachable")

    async def _turn(self, row: OutboxRow) -> OutboxRow:
        ids = list(row.message_ids)
        if not ids and row.progress_message_id:
            ids = [row.progress_message_id]
        attempt = 0
        last = len(row.chunks)
        while True:
            try:
                # Placeholders first, each recorded before the next: every final chunk is then
                # delivered by an edit of a recorded message (idempotent on retry).
                while len(ids) < len(row.chunks):
                    mid = await self.connector.send(row.target, Chunk(html=PLACEHOLDER,
                                                                       plain=PLACEHOLDER))
                    self._fault("placeholder_sent_before_record")
                    ids.append(mid)
                    await self.outbox.update(row.id, message_ids=ids)
                for i in range(row.edited, len(row.chunks)):
                    held = await self._edit_chunk(row.target, ids[i], row.chunks[i])
                    self._fault("final_edited_before_record")
                    if held != ids[i]:
                        ids[i] = held
                    if i + 1 < len(row.chunks):
                        # The last chunk's record is the finishing transaction below.
                        await self.outbox.update(row.id, message_ids=ids, edited=i + 1)
                break
            except DeliveryError as exc:
                attempt += 1
                if _rate_limited(exc):
                    self._observe("channel.rate_limited")
                if exc.kind == "fatal" or attempt >= self.max_attempts:
                    log.warning("outbox.delivery_failed", row=row.id, error=str(exc))
                    return await self.outbox.finish(
                        row, status="failed", error=str(exc),
                        values={"attempts": row.attempts + attempt})
                self._observe("channel.delivery_retried")
                await asyncio.sleep(min(30.0, exc.retry_after or 0.2 * 2**attempt))
                row = await self.outbox.by_id(row.id)
                ids = list(row.message_ids) or ids
        return await self._sent(row, ids, values={"edited": max(last, row.edited)})

    async def _sent(
        self, row: OutboxRow, ids: list[str], values: dict[str, Any] | None = None
    ) -> OutboxRow:
        """Record a delivered row: its message ids, ``sent``, its event ``done`` and the
        message index entries, in ONE transaction (a crash before it re-runs the delivery,
        which reconciles by editing the recorded messages again)."""

        received: list[datetime | None] = []

        def remember(conn: Connection) -> None:
            self.index.remember_in(
                conn, platform=row.platform, workspace=row.workspace,
                channel=row.target.channel, message_ids=ids,
                thread_root=row.target.thread_root, from_bot=True,
            )
            if row.event_id is not None:  # when the message came in: the reply's latency
                received.append(conn.execute(_EVENT_RECEIVED, {"b_id": row.event_id}).scalar())

        sent = await self.outbox.finish(row, status="sent",
                                        values={**(values or {}), "message_ids": ids},
                                        also=remember)
        latency = None
        if received and received[0] is not None:
            at = received[0] if received[0].tzinfo else received[0].replace(tzinfo=UTC)
            latency = (utcnow() - at).total_seconds()
        self._observe("channel.reply_sent", latency_s=latency)
        return sent
