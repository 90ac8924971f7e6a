"""The outbox table: one visible final reply per inbound message (delivery: ``bots.turn.deliver``).

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

A turn's progress message is recorded like an answer: its *intent* first, then the send,
then its id. The intent (``progress_state = "sending"``) is written with the row itself, in
the transaction that accepts the turn (no transaction of its own); the id follows the send
(:meth:`Outbox.record_progress_message`). A turn recovered after a crash finds its row in
one of three states: an id (the placeholder is edited on: ``bots.turn.run``), no intent (no
placeholder was ever sent), or an intent without an id: the send's outcome is unknown, and
it is reconciled like an uncertain answer, never re-sent blindly: where the platform can
read the thread back (Slack, Discord) the bot's unrecorded "⏳" placeholder is found and
reused; Telegram's Bot API cannot, so a new one is sent, and one stray placeholder remains
only if the crash fell between the platform accepting the send and the id's record.

A file sent into a thread (``send_file``, an approval's full diff) is a ``file`` row keyed by
what asked for it (a tool call, an approval request): written ``ready`` before anything is
uploaded, ``sending`` just before the upload, ``sent`` with the platform's id after it. Its
one chunk is the caption and carries the file's description (:class:`OutgoingFile`); the
bytes stay where they came from. ``bots.uploads`` reconciles a row left ``sending``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog
from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from bots.events import ReplyTarget
from bots.format import Chunk
from bots.store._tables import events_table, messages_table, outbox_table
from bots.store.leases import ThreadLeaseLost
from bots.store.threads import MessageIndex
from geode.secret_redaction import redact_text
from geode.store.models import utcnow

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection

    from geode.store.claim import Claim
    from geode.store.database import Database

__all__ = ["PLACEHOLDER", "Outbox", "OutboxRow", "OutgoingFile"]

log = structlog.get_logger(__name__)
_O = outbox_table
_E = events_table
_M = messages_table
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
#: the event's update that also says when the event was recorded (a reply's latency)
_UPDATE_EVENT_RECEIVED = _UPDATE_EVENT.returning(_E.c.created_at)
_EVENT_RECEIVED = select(_E.c.created_at).where(_E.c.id == bindparam("b_id"))
_Stmt = tuple[Any, dict[str, Any]]


def _event_update(event_id: int, **values: Any) -> _Stmt:
    return _UPDATE_EVENT, {**values, "updated_at": utcnow(), "b_id": event_id}


@dataclass(frozen=True, kw_only=True)
class OutgoingFile:
    """What a ``file`` row uploads: enough to recognise it in the thread afterwards."""

    name: str
    size: int
    sha256: str
    image: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256,
                "image": self.image}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OutgoingFile:
        return cls(name=str(data.get("name", "")), size=int(data.get("size", 0)),
                   sha256=str(data.get("sha256", "")), image=bool(data.get("image")))


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
    #: a ``file`` row's file (its caption is the one chunk)
    file: OutgoingFile | None = None
    created_at: datetime | None = None
    error: str = ""


def _row(r: Any, target: ReplyTarget | None = None) -> OutboxRow:
    """``r`` as a row; ``target``: the row's target as the caller holds it (a row's target
    is fixed when the row is made), instead of reading it back from its JSON."""
    chunks = r.chunks or []
    described = chunks[0].get("file") if chunks and isinstance(chunks[0], dict) else None
    return OutboxRow(
        id=int(r.id), session_key=r.session_key, turn_key=r.turn_key, event_id=r.event_id,
        kind=r.kind, platform=r.platform, workspace=r.workspace,
        target=target if target is not None else ReplyTarget.from_json(dict(r.target)),
        status=r.status,
        loop_turn_id=r.loop_turn_id, progress_message_id=r.progress_message_id,
        progress_state=r.progress_state, message_ids=[str(m) for m in r.message_ids or []],
        chunks=[Chunk(formatted=c["html"], fallback=c["plain"]) for c in r.chunks or []],
        edited=int(r.edited), attempts=int(r.attempts),
        file=OutgoingFile.from_json(described) if isinstance(described, dict) else None,
        created_at=r.created_at, error=r.error or "",
    )


def _chunks_json(chunks: list[Chunk]) -> list[dict[str, str]]:
    # The stored keys keep their first names: rows written by an older replica stay readable.
    return [{"html": c.formatted, "plain": c.fallback} for c in chunks]


class Outbox:
    """The ``channel_outbox`` table.

    Each method is one transaction in one hop to the store's worker threads
    (:meth:`Database.run_write` / :meth:`Database.run_read`, SQLAlchemy Core on a sync
    connection); the ``*_in`` forms run inside a caller's sync transaction.
    """

    def __init__(self, *, store: Database, index: MessageIndex | None = None) -> None:
        self._store = store
        #: the thread of every message the bot sends (a reply to it stays in the thread)
        self._index = index

    @staticmethod
    def _insert_stmt(
        *, session_key: str, turn_key: str, event_id: int | None, kind: str, platform: str,
        workspace: str, target: ReplyTarget, status: str, chunks: list[Chunk],
        loop_turn_id: str = "", progress_state: str = "",
    ) -> _Stmt:
        now = utcnow()
        return _INSERT, {
            "session_key": session_key, "turn_key": turn_key, "event_id": event_id, "kind": kind,
            "platform": platform, "workspace": workspace, "channel": target.channel,
            "thread_root": target.thread_root, "target": target.to_json(), "status": status,
            "loop_turn_id": loop_turn_id, "progress_message_id": None,
            "progress_state": progress_state,
            "message_ids": [], "chunks": _chunks_json(chunks),
            "edited": 0, "attempts": 0, "error": "", "created_at": now, "updated_at": now,
        }

    def open_turn_in(
        self, conn: Connection, *, event_id: int, session_id: str, turn_key: str,
        platform: str, workspace: str, target: ReplyTarget,
    ) -> OutboxRow:
        """Accept a turn inside the caller's write transaction: its ``pending`` outbox row
        (with the id the loop turn will run under, so a restart can find that turn in the
        checkpoint chain, and the intent to send its progress message: recorded before that
        send, so a restart knows one may be in the thread) and the event's ``running``
        status.

        Raises:
            IntegrityError: the row existed already; the caller's transaction is void.
        """
        loop_turn_id = f"t-{secrets.token_hex(6)}"
        result = conn.execute(*self._insert_stmt(
            session_key=session_id, turn_key=turn_key, event_id=event_id, kind="turn",
            platform=platform, workspace=workspace, target=target, status="pending",
            chunks=[], loop_turn_id=loop_turn_id, progress_state="sending",
        ))
        # decision "turn.queued" until it gets its lanes (``bots.store.queue``): then "turn"
        conn.execute(*_event_update(event_id, status="running", decision="turn.queued",
                                    session_id=session_id))
        pk = result.inserted_primary_key
        assert pk is not None
        return OutboxRow(
            id=int(pk[0]), session_key=session_id, turn_key=turn_key,
            event_id=event_id, kind="turn", platform=platform, workspace=workspace,
            target=target, status="pending", loop_turn_id=loop_turn_id, progress_message_id=None,
            progress_state="sending", message_ids=[], chunks=[], edited=0, attempts=0,
            created_at=utcnow(),
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

    async def add_file(
        self, *, session_key: str, turn_key: str, platform: str, workspace: str,
        target: ReplyTarget, file: OutgoingFile, caption: str = "",
    ) -> OutboxRow | None:
        """Record a file owed to a thread (``ready``), before any upload; None if a row of
        that key exists already (the caller reconciles it: :meth:`get`)."""
        stmt = self._insert_stmt(
            session_key=session_key, turn_key=turn_key, event_id=None, kind="file",
            platform=platform, workspace=workspace, target=target, status="ready",
            chunks=[Chunk(formatted=caption, fallback=caption)],
        )
        stmt[1]["chunks"][0]["file"] = file.to_json()

        def tx(conn: Connection) -> Any:
            conn.execute(*stmt)
            return conn.execute(select(_O).where(_O.c.session_key == session_key,
                                                 _O.c.turn_key == turn_key)).first()

        try:
            return _row(await self._store.run_write(tx))
        except IntegrityError:
            return None

    async def _one(self, query: Any) -> OutboxRow | None:
        await self._store.flush_later()  # a progress id recorded without waiting
        r = await self._store.run_read(lambda conn: conn.execute(query).first())
        return None if r is None else _row(r)

    async def get(self, session_key: str, turn_key: str) -> OutboxRow | None:
        return await self._one(
            select(_O).where(_O.c.session_key == session_key, _O.c.turn_key == turn_key))

    async def by_id(self, row_id: int) -> OutboxRow:
        await self._store.flush_later()
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
        await self._store.flush_later()
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
        self, row: OutboxRow, chunks: list[Chunk], *,
        fence: Claim | None = None,
    ) -> OutboxRow | None:
        """Record ``row``'s final answer (pending -> ready); the row as committed, or None
        when the row is no longer pending: another run of the turn (a replica that took
        the thread over meanwhile) recorded its answer first, and delivers that one.

        ``fence`` is checked first in the same transaction; if it raises ``ThreadLeaseLost``
        (another replica holds the thread now, and its run of the turn is the one that
        counts) nothing is recorded and None is returned.
        """
        row_id = row.id
        stmt = self.update_stmt(row_id, {"status": "ready", "chunks": chunks})

        def tx(conn: Connection) -> Any:
            if fence is not None:
                try:
                    fence.check(conn)
                except ThreadLeaseLost as exc:
                    log.warning("outbox.ready_fenced", row=row_id, reason=str(exc))
                    return None
            return conn.execute(_READY, stmt[1]).first()

        r = await self._store.run_write(tx)
        return None if r is None else _row(r, row.target)

    async def finish(
        self, row: OutboxRow, *, status: str, error: str = "",
        values: dict[str, Any] | None = None,
        also: Callable[[Connection], None] | None = None,
    ) -> OutboxRow:
        """Mark the row (and its event) finished, in one transaction; returns the row.

        ``values`` are more columns to set in the same update (the delivered message ids);
        ``also`` runs inside the same transaction (the message index entries).
        """
        return (await self._finish(row, status=status, error=error, values=values,
                                   also=also))[0]

    async def _finish(
        self, row: OutboxRow, *, status: str, error: str = "",
        values: dict[str, Any] | None = None,
        also: Callable[[Connection], None] | None = None, received: bool = False,
    ) -> tuple[OutboxRow, datetime | None]:
        """:meth:`finish`, and with ``received`` when the row's event was recorded (read
        by the event's own update when there is one: no statement of its own)."""
        stmt = self.update_stmt(row.id, {**(values or {}), "status": status,
                                         # at rest (shown on the console): masked, then cut
                                         "error": redact_text(error)[:2000] if error else ""})
        event_stmt = None
        if row.event_id is not None and row.kind == "turn":
            event_stmt = _event_update(row.event_id,
                                       status="done" if status == "sent" else "failed")
        event_id = row.event_id if received else None

        def tx(conn: Connection) -> tuple[Any, datetime | None]:
            updated = conn.execute(_UPDATE_RETURNING, stmt[1]).first()
            at = None
            if event_stmt is not None and event_id is not None:
                at = conn.execute(_UPDATE_EVENT_RECEIVED, event_stmt[1]).scalar()
            elif event_stmt is not None:
                conn.execute(*event_stmt)
            elif event_id is not None:
                at = conn.execute(_EVENT_RECEIVED, {"b_id": event_id}).scalar()
            if also is not None:
                also(conn)  # the message index only: ``updated`` stays the row as committed
            return updated, at

        updated, at = await self._store.run_write(tx)
        return _row(updated, row.target), at

    async def record_progress_message(self, row: OutboxRow, message_id: str) -> None:
        """The turn's progress message exists: its id on the row, and in the message index
        (a reply to it stays in the thread), in one transaction.

        Without waiting for it (``Database.run_write_later``): on SQLite it commits with the
        turn's next write (the session, the lane claim, a checkpoint), before anything that
        write leads to, with the final answer's record at the latest, and after at most
        ``LATER_S`` when no other write comes (a turn queued for its lanes). A crash before
        that commit leaves the row's intent without an id: the recovered turn looks for the
        placeholder (see the module docstring); the answer is delivered once either way
        (the row's id is read back only from committed rows)."""
        stmt = self.update_stmt(row.id, {"progress_message_id": message_id,
                                         "progress_state": "sent"})

        def tx(conn: Connection) -> None:
            conn.execute(*stmt)
            self._remember_in(conn, row, [message_id])

        def failed(exc: Exception) -> None:
            # the answer is then sent as a new message (the row has no progress id)
            log.warning("outbox.progress_record_failed", row=row.id, error=str(exc))

        await self._store.run_write_later(tx, on_error=failed)

    async def record_sent(
        self, row: OutboxRow, message_ids: list[str], *, values: dict[str, Any] | None = None
    ) -> tuple[OutboxRow, float | None]:
        """Record a delivered row: its message ids, ``sent``, its event ``done`` and the
        message index entries, in ONE transaction (a crash before it re-runs the delivery,
        which reconciles by editing the recorded messages again).

        Returns the row and the seconds since its message was recorded (the reply's
        latency; None for a row without an event)."""

        def also(conn: Connection) -> None:
            self._remember_in(conn, row, message_ids)

        # when the message came in: the reply's latency
        sent, received = await self._finish(
            row, status="sent", values={**(values or {}), "message_ids": message_ids},
            also=also, received=True,
        )
        latency = None
        if received is not None:
            at = received if received.tzinfo else received.replace(tzinfo=UTC)
            latency = (utcnow() - at).total_seconds()
        return sent, latency

    async def recorded(self, row: OutboxRow, message_ids: list[str]) -> set[str]:
        """Of ``message_ids`` (bot messages in ``row``'s channel), those already recorded in
        the message index: another turn's, not a lost placeholder of this one."""
        if not message_ids:
            return set()
        query = select(_M.c.message_id).where(
            _M.c.platform == row.platform, _M.c.workspace == row.workspace,
            _M.c.channel == row.target.channel, _M.c.message_id.in_(message_ids))
        await self._store.flush_later()
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return {str(r.message_id) for r in rows}

    def _remember_in(self, conn: Connection, row: OutboxRow, message_ids: list[str]) -> None:
        if self._index is not None:
            self._index.remember_in(
                conn, platform=row.platform, workspace=row.workspace,
                channel=row.target.channel, message_ids=message_ids,
                thread_root=row.target.thread_root, from_bot=True,
            )
