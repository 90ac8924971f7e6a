"""The SQL of a rewind (``geode.rewind``): its durable intent and the one transaction that
moves the session's head.

A rewind is written in three steps so that it happens whole or not at all, whichever
process or replica finishes it: the plan is stored as the session's ``rewind_pending``
metadata (the intent, one transaction, refused if the head moved since the plan was made);
the files are put back (idempotent, outside the database); then :meth:`RewindStore.commit`
copies the conversation as it was into an archive session, drops the rewound messages,
appends a ``rewind`` link to the chain with the target checkpoint's state, clears the
intent and writes the ``session.rewound`` timeline row: one transaction.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import String, delete, insert, select, update
from sqlalchemy import cast as sql_cast
from sqlalchemy.exc import SQLAlchemyError

from geode.errors import StoreError
from geode.store.models import checkpoints_table, messages_table, sessions_table, utcnow
from geode.store.sessions import SessionNotFoundError
from geode.store.timeline import insert_rows, timeline_row

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = ["PENDING_KEY", "Committed", "RewindConflictError", "RewindStore"]

_S, _M, _C = sessions_table, messages_table, checkpoints_table
#: the session metadata key holding an unfinished rewind's plan
PENDING_KEY = "rewind_pending"


class RewindConflictError(StoreError):
    """The session moved since the rewind was planned (a turn ran), or another rewind is
    pending on it."""


@dataclass(frozen=True, kw_only=True)
class Committed:
    """A rewind as committed: the archive session that keeps the conversation as it was."""

    archive_id: str
    seq: int
    #: False: the intent was already committed (or dropped) by someone else
    applied: bool


class RewindStore:
    """Rewind intents and their commit, on the harness's store."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    def _head(self, conn: Connection, session_id: str) -> Any:
        query = select(_S.c.status, _S.c.last_seq, _S.c.message_count, _S.c.mode, _S.c.model,
                       _S.c.title, _S.c["metadata"]).where(_S.c.id == session_id)
        if self._store.is_postgres:
            query = query.with_for_update()
        row = conn.execute(query).first()
        if row is None:
            raise SessionNotFoundError(session_id)
        return row

    async def write_intent(self, session_id: str, intent: dict[str, Any]) -> None:
        """Store ``intent`` (``intent["seq"]`` is the head it was planned at) durably.

        Raises:
            RewindConflictError: the head moved since, or another rewind is pending.
        """

        def write(conn: Connection) -> None:
            head = self._head(conn, session_id)
            meta = dict(head._mapping["metadata"] or {})
            if meta.get(PENDING_KEY):
                raise RewindConflictError(f"session {session_id!r} has a rewind in progress")
            if int(head.last_seq) != int(intent["seq"]):
                raise RewindConflictError(
                    f"session {session_id!r} moved on since the rewind was planned "
                    "(a turn ran); ask again")
            meta[PENDING_KEY] = intent
            conn.execute(update(_S).where(_S.c.id == session_id)
                         .values({"metadata": meta, "updated_at": utcnow()}))

        await self._run(write, session_id)

    async def pending(self, session_id: str) -> dict[str, Any] | None:
        """The session's unfinished rewind, if any."""
        query = select(_S.c["metadata"]).where(_S.c.id == session_id)
        meta = await self._store.run_read(lambda conn: conn.execute(query).scalar())
        found = (meta or {}).get(PENDING_KEY)
        return dict(found) if isinstance(found, dict) else None

    async def sessions_pending(self) -> list[str]:
        """Sessions with an unfinished rewind (looked for when a process starts)."""
        query = select(_S.c.id, _S.c["metadata"]).where(
            sql_cast(_S.c["metadata"], String).like(f"%{PENDING_KEY}%"))
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return [str(r.id) for r in rows if isinstance((r[1] or {}).get(PENDING_KEY), dict)]

    async def drop(self, session_id: str, intent_id: str) -> None:
        """Forget an intent that cannot be committed (its files were not touched)."""

        def clear(conn: Connection) -> None:
            head = self._head(conn, session_id)
            meta = dict(head._mapping["metadata"] or {})
            if (meta.get(PENDING_KEY) or {}).get("id") == intent_id:
                meta.pop(PENDING_KEY)
                conn.execute(update(_S).where(_S.c.id == session_id).values({"metadata": meta}))

        await self._run(clear, session_id)

    async def commit(self, session_id: str, intent_id: str, *,
                     timeline: dict[str, Any]) -> Committed:
        """Move the head to the intent's target, in one transaction (see the module doc).

        """
        secrets = self._store.secrets

        def move(conn: Connection) -> Committed:
            head = self._head(conn, session_id)
            meta = dict(head._mapping["metadata"] or {})
            intent = meta.get(PENDING_KEY)
            if not isinstance(intent, dict) or intent.get("id") != intent_id:
                return Committed(archive_id="", seq=int(head.last_seq), applied=False)
            # The head moved while the intent was pending (a turn that was already running
            # saved): the rewind still completes, whole, and takes that turn back too; the
            # files are already back, and an intent that could never commit would hold the
            # session forever. The timeline row says so.
            moved = int(head.last_seq) != int(intent["seq"])
            target = intent["target"]
            count, now = int(target["message_count"]), utcnow()
            archive = self._archive(conn, session_id, head, intent, now)
            conn.execute(delete(_M).where(_M.c.session_id == session_id, _M.c.idx >= count))
            seq = int(head.last_seq) + 1
            conn.execute(insert(_C), {
                "session_id": session_id, "seq": seq, "kind": "rewind", "status": head.status,
                "turn_id": str(target.get("turn_id", "")), "message_count": count,
                "state": dict(target.get("state") or {}), "created_at": now})
            meta.pop(PENDING_KEY)
            conn.execute(update(_S).where(_S.c.id == session_id).values(
                {"metadata": meta, "last_seq": seq, "message_count": count, "updated_at": now}))
            insert_rows(conn, [timeline_row(
                session_id=session_id, turn_id="", kind="session.rewound",
                payload={**timeline, "archive_session_id": archive, "intent_id": intent_id,
                         "moved_since_planned": moved},
                secrets=secrets)])
            return Committed(archive_id=archive, seq=seq, applied=True)

        return cast(Committed, await self._run(move, session_id))

    def _archive(self, conn: Connection, session_id: str, head: Any, intent: dict[str, Any],
                 now: Any) -> str:
        """A completed session holding the conversation as it was before the rewind (its
        parent is the rewound session): the rewound turns stay readable."""
        archive = uuid.uuid4().hex
        conn.execute(insert(_S), {
            "id": archive, "created_at": now, "updated_at": now, "status": "completed",
            "model": head.model, "mode": head.mode,
            "title": f"rewound turns of {head.title or session_id}"[:500],
            "parent_session_id": session_id,
            "metadata": {"rewound_from": {"session_id": session_id, "turns": intent["turns"],
                                          "intent_id": intent["id"]}},
            "last_seq": 1, "message_count": int(head.message_count)})
        rows = conn.execute(select(_M.c.idx, _M.c.payload).where(
            _M.c.session_id == session_id, _M.c.idx < int(head.message_count))).all()
        if rows:
            conn.execute(insert(_M), [{"session_id": archive, "idx": r.idx, "payload": r.payload,
                                       "created_at": now} for r in rows])
        state = conn.execute(select(_C.c.state).where(
            _C.c.session_id == session_id, _C.c.seq == int(head.last_seq))).scalar()
        conn.execute(insert(_C), {
            "session_id": archive, "seq": 1, "kind": "rewound", "status": "completed",
            "turn_id": "", "message_count": int(head.message_count),
            "state": dict(state or {}), "created_at": now})
        return archive

    async def _run(self, fn: Any, session_id: str) -> Any:
        try:
            return await self._store.run_write(fn)
        except StoreError:
            raise
        except SQLAlchemyError as exc:
            raise StoreError(
                f"the rewind of session {session_id!r} could not be written: "
                f"{type(exc).__name__}") from exc
