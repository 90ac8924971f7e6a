"""The checkpoint chain: messages + loop state + guard counters, the only thing ever restored.

Every save is one write transaction that appends a checkpoint row, writes the messages
that changed since this process's previous save, and moves the session's head
(``last_seq``, ``message_count``, ``status``). Messages are diffed against what this
checkpointer last wrote, so a round of a 500-message session writes one or two rows; a
rewrite (compaction) or a chain moved by another writer falls back to rewriting the rows.

The transaction runs in one worker-thread hop (:meth:`Database.run_write`), with no
event-loop round trip between its statements. The usual save is three: move the head
*if* it is where this checkpointer left it (a first save assumes a new session's head),
insert the new message rows, insert the link. Otherwise (a session with a chain not
loaded, another writer, a status set meanwhile) it reads the head under the lock and
checks the transition first, as before.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import structlog
from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from geode.errors import CheckpointSaveError, StoreError
from geode.loop.protocols import BatchSaveFailed, TurnInfo
from geode.messages import Message
from geode.secret_redaction import redact
from geode.store.claim import Claim
from geode.store.models import checkpoints_table, messages_table, sessions_table, utcnow
from geode.store.sessions import (
    IllegalTransitionError,
    SessionNotFoundError,
    check_transition,
)
from geode.store.timeline import insert_rows, timeline_row

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = ["CheckpointRow", "CheckpointStore", "Restored", "SessionCheckpointer"]

log = structlog.get_logger(__name__)

_S, _M, _C = sessions_table, messages_table, checkpoints_table


def _at_rest(message: Message) -> dict[str, Any]:
    """A message as it is stored: credentials masked (registered secrets, key shapes,
    credential-named tool arguments), issue #30. The running turn keeps what the model and
    the tools said; a session restored from the store sees the masks."""
    return cast("dict[str, Any]", redact(message.model_dump(mode="json")))

# The save's statements, built once: building and cache-keying a Core statement costs
# about as much as SQLite executing it. Bind names start with ``b_`` so they cannot clash
# with the columns an UPDATE sets from its parameters.
_HEAD = select(_S.c.status, _S.c.last_seq, _S.c.message_count).where(_S.c.id == bindparam("b_sid"))
_HEAD_LOCKED = _HEAD.with_for_update()
_INSERT_MESSAGE = insert(_M)
_INSERT_LINK = insert(_C)
_DROP_MESSAGES = delete(_M).where(
    _M.c.session_id == bindparam("b_sid"), _M.c.idx >= bindparam("b_keep")
)
# SET columns come from the parameters: last_seq, message_count, updated_at (+ status).
_MOVE_HEAD = update(_S).where(_S.c.id == bindparam("b_sid"))
# The usual save: move the head only if it is exactly where this checkpointer left it
# (seq, message count and status), so the transition was checked against the true current
# status. One statement instead of read-then-write; on PostgreSQL the UPDATE takes the row
# lock and re-checks the condition after waiting for it. No row matched -> checked path.
_ADVANCE_HEAD = update(_S).where(
    _S.c.id == bindparam("b_sid"),
    _S.c.last_seq == bindparam("b_seq"),
    _S.c.message_count == bindparam("b_count"),
    _S.c.status == bindparam("b_status"),
)


@dataclass(frozen=True, kw_only=True)
class Restored:
    """What a resume gets back: the latest link of the chain."""

    messages: list[Message]
    state: dict[str, Any]
    status: str
    seq: int
    kind: str
    turn_id: str = ""


@dataclass(frozen=True, kw_only=True)
class CheckpointRow:
    session_id: str
    seq: int
    kind: str
    status: str
    turn_id: str
    message_count: int
    state: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None


@dataclass(frozen=True)
class _Written:
    """What this checkpointer last committed (or loaded): the chain head it left."""

    seq: int
    messages: tuple[Message, ...]
    status: str


#: the head of a session nothing was saved to yet (``SessionStore.create``)
_NEW_SESSION = _Written(seq=0, messages=(), status="active")


def _legal(session_id: str, current: str, target: str) -> bool:
    try:
        check_transition(session_id, current, target)
    except IllegalTransitionError:
        return False
    return True


def _first_difference(old: Sequence[Message], new: Sequence[Message]) -> int:
    limit = min(len(old), len(new))
    # The loop appends to the same list, so unchanged messages are the very same (frozen)
    # objects: one C-level identity pass settles the usual case without a Python loop.
    if all(map(operator.is_, old[:limit], new[:limit])):
        return limit
    for i in range(limit):
        if old[i] is not new[i] and old[i] != new[i]:
            return i
    return limit


class SessionCheckpointer:
    """The checkpoint chain of one session; implements ``geode.loop.protocols.Checkpointer``.

    Build it with ``store.checkpointer(session_id)``; the session row must exist
    (``store.sessions.create`` / ``ensure``).
    """

    def __init__(
        self,
        *,
        store: Database,
        session_id: str,
        fence: Claim | None = None,
        opening: Sequence[tuple[str, Mapping[str, Any], str]] = (),
        riders: Sequence[Callable[[Connection], None]] = (),
    ) -> None:
        """Args:
            fence: checked first inside every save's transaction; raising aborts the save
                (a channel turn's claim that this replica still holds the thread, see
                ``bots.store.leases``).
            opening: timeline rows ``(kind, payload, turn_id)`` written in the same
                transaction as the next save (who sent the message a turn starts with):
                they belong with that checkpoint and cost no transaction of their own.
                Kept until a save commits.
            riders: statements of the turn that need no transaction of their own (the
                memory entries' use counts, :func:`geode.store.memory.count_use`), run
                last in the next save's transaction; kept until a save commits. One that
                raises aborts that save like any of its statements.
        """
        self._store = store
        self.session_id = session_id
        self._written: _Written | None = None
        self._fence = fence
        self._staged: list[dict[str, Any]] = [
            timeline_row(session_id=session_id, turn_id=turn_id, kind=kind,
                         payload=dict(payload), secrets=store.secrets)
            for kind, payload, turn_id in opening
        ]
        self._riders = list(riders)

    async def save(
        self,
        *,
        messages: Sequence[Message],
        state: dict[str, Any],
        status: str,
        kind: str = "",
        turn_id: str = "",
    ) -> None:
        """Save messages + state and move the session to ``status``.

        Raises:
            IllegalTransitionError: ``status`` is not reachable (e.g. the session is
                completed and was not reopened).
            CheckpointSaveError: the database refused the write.
        """
        kind = kind or ("final" if status in ("completed", "error") else "checkpoint")
        try:
            await self._save(messages, state, status=status, kind=kind, turn_id=turn_id)
        except StoreError:
            raise
        except (SQLAlchemyError, OSError, TypeError, ValueError) as exc:
            raise CheckpointSaveError(
                f"saving checkpoint of session {self.session_id!r} failed: {_describe(exc)}"
            ) from exc

    async def save_batch_proposed(
        self, *, messages: Sequence[Message], state: dict[str, Any], turn: TurnInfo
    ) -> None:
        """Save the proposed tool batch before any tool of it runs.

        Raises:
            BatchSaveFailed: the save failed (cause chained); the caller must run nothing.
        """
        try:
            await self._save(
                messages, state, status=None, kind="batch_proposed", turn_id=turn.turn_id
            )
        except (StoreError, SQLAlchemyError, OSError, TypeError, ValueError) as exc:
            log.error(
                "checkpoint.batch_save_failed",
                session_id=self.session_id,
                turn_id=turn.turn_id,
                error=_describe(exc),
            )
            raise BatchSaveFailed(
                f"the proposed tool batch of session {self.session_id!r} could not be saved "
                f"({_describe(exc)}); no tool of it ran"
            ) from exc

    async def save_batch_done(
        self, *, messages: Sequence[Message], state: dict[str, Any], turn: TurnInfo
    ) -> None:
        """Save the finished batch (tool results appended).

        Raises:
            CheckpointSaveError: the database refused the write.
        """
        try:
            await self._save(messages, state, status=None, kind="batch_done", turn_id=turn.turn_id)
        except StoreError:
            raise
        except (SQLAlchemyError, OSError, TypeError, ValueError) as exc:
            raise CheckpointSaveError(
                f"saving the finished batch of session {self.session_id!r} failed: {_describe(exc)}"
            ) from exc

    async def load(self) -> Restored | None:
        """The latest checkpoint, or None if the session has none (or does not exist)."""
        try:
            # Parsing 500 messages costs a few ms of CPU: done in the worker, not the loop.
            loaded = await self._store.run_read(self._read_head)
        except SQLAlchemyError as exc:
            raise StoreError(
                f"loading session {self.session_id!r} failed: {_describe(exc)}"
            ) from exc
        if loaded is not None:
            self._written = _Written(
                seq=loaded.seq, messages=tuple(loaded.messages), status=loaded.status
            )
        return loaded

    def _read_head(self, conn: Connection) -> Restored | None:
        head = conn.execute(
            select(_S.c.status, _S.c.last_seq).where(_S.c.id == self.session_id)
        ).first()
        if head is None or head.last_seq == 0:
            return None
        cp = conn.execute(
            select(_C.c.seq, _C.c.kind, _C.c.turn_id, _C.c.message_count, _C.c.state)
            .where(_C.c.session_id == self.session_id)
            .order_by(_C.c.seq.desc())
            .limit(1)
        ).first()
        if cp is None:
            return None
        payloads = (
            conn.execute(
                select(_M.c.payload)
                .where(_M.c.session_id == self.session_id, _M.c.idx < cp.message_count)
                .order_by(_M.c.idx)
            )
            .scalars()
            .all()
        )
        if len(payloads) != cp.message_count:
            raise StoreError(
                f"the checkpoint chain of session {self.session_id!r} is broken: checkpoint "
                f"{cp.seq} covers {cp.message_count} messages, the store holds {len(payloads)}"
            )
        return Restored(
            messages=[Message.model_validate(p) for p in payloads],
            state=dict(cp.state),
            status=head.status,
            seq=cp.seq,
            kind=cp.kind,
            turn_id=cp.turn_id,
        )

    async def _save(
        self,
        messages: Sequence[Message],
        state: dict[str, Any],
        *,
        status: str | None,
        kind: str,
        turn_id: str,
    ) -> None:
        # Fail on unserialisable state before taking the write lock.
        state_json = json.loads(json.dumps(state))
        snapshot = tuple(messages)
        written = self._written
        staged = self._staged[:]
        riders = self._riders[:]
        fence = self._fence

        def link(conn: Connection) -> _Written:
            if fence is not None:
                fence.check(conn)
            done = self._write_link(conn, written, snapshot, state_json, status, kind, turn_id)
            insert_rows(conn, [{**r, "turn_id": r["turn_id"] or turn_id} for r in staged])
            for ride in riders:
                ride(conn)
            return done

        try:
            self._written = await self._store.run_write(link)
            del self._staged[:len(staged)]
            del self._riders[:len(riders)]
        except BaseException:
            # The transaction rolled back; what this process believes is in the store
            # may be stale now, so the next save rewrites the rows from scratch.
            self._written = None
            raise

    def _write_link(
        self,
        conn: Connection,
        written: _Written | None,
        messages: tuple[Message, ...],
        state: dict[str, Any],
        status: str | None,
        kind: str,
        turn_id: str,
    ) -> _Written:
        sid = self.session_id
        now = utcnow()
        if written is None:
            # First save of this checkpointer: most often on a session just created (a
            # channel thread's first turn), whose head is the one assumed here; if it is
            # not, the UPDATE matches nothing and the checked path below reads the head.
            written = _NEW_SESSION
        if _legal(sid, written.status, status or "active"):
            seq, new_status = written.seq + 1, status or written.status
            advanced = conn.execute(
                _ADVANCE_HEAD,
                {
                    "last_seq": seq,
                    "message_count": len(messages),
                    "status": new_status,
                    "updated_at": now,
                    "b_sid": sid,
                    "b_seq": written.seq,
                    "b_count": len(written.messages),
                    "b_status": written.status,
                },
            )
            if advanced.rowcount == 1:
                keep = _first_difference(written.messages, messages)
                self._write_rows(conn, messages, keep, len(written.messages), now)
                self._append_link(conn, seq, messages, state, new_status, kind, turn_id, now)
                return _Written(seq=seq, messages=messages, status=new_status)

        # A head not where this checkpointer assumed it (a first save on a session with a
        # chain, another writer, set_status, reopen) or an illegal move: read the head
        # (row-locked on PostgreSQL) and check against what is really there.
        row = conn.execute(
            _HEAD_LOCKED if self._store.is_postgres else _HEAD, {"b_sid": sid}
        ).first()
        if row is None:
            raise SessionNotFoundError(sid)
        # A batch on a finished session is refused like any illegal transition.
        check_transition(sid, row.status, status or "active")
        new_status = status or str(row.status)
        if (
            written is not None
            and written.seq == row.last_seq
            and len(written.messages) == row.message_count
        ):
            keep, stored = _first_difference(written.messages, messages), len(written.messages)
        else:
            keep, stored = 0, int(row.message_count)
        self._write_rows(conn, messages, keep, stored, now)
        seq = int(row.last_seq) + 1
        self._append_link(conn, seq, messages, state, new_status, kind, turn_id, now)
        conn.execute(
            _MOVE_HEAD,
            {
                "last_seq": seq,
                "message_count": len(messages),
                "status": new_status,
                "updated_at": now,
                "b_sid": sid,
            },
        )
        return _Written(seq=seq, messages=messages, status=new_status)

    def _write_rows(
        self,
        conn: Connection,
        messages: tuple[Message, ...],
        keep: int,
        stored: int,
        now: datetime,
    ) -> None:
        """Make the message rows equal ``messages``: rows from ``keep`` on are replaced."""
        if keep < stored:
            conn.execute(_DROP_MESSAGES, {"b_sid": self.session_id, "b_keep": keep})
        rows = [
            {
                "session_id": self.session_id,
                "idx": i,
                "payload": _at_rest(messages[i]),
                "created_at": now,
            }
            for i in range(keep, len(messages))
        ]
        if len(rows) == 1:
            conn.execute(_INSERT_MESSAGE, rows[0])  # the usual round: one new message
        elif rows:
            conn.execute(_INSERT_MESSAGE, rows)  # executemany

    def _append_link(
        self,
        conn: Connection,
        seq: int,
        messages: tuple[Message, ...],
        state: dict[str, Any],
        status: str,
        kind: str,
        turn_id: str,
        now: datetime,
    ) -> None:
        conn.execute(
            _INSERT_LINK,
            {
                "session_id": self.session_id,
                "seq": seq,
                "kind": kind,
                "status": status,
                "turn_id": turn_id,
                "message_count": len(messages),
                "state": state,
                "created_at": now,
            },
        )


class CheckpointStore:
    """Read access to checkpoint chains (``geode sessions show``)."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    async def list(self, session_id: str, *, limit: int = 100) -> list[CheckpointRow]:
        """The newest ``limit`` checkpoints, oldest first."""
        query = select(_C).where(_C.c.session_id == session_id).order_by(_C.c.seq.desc())
        rows = await self._store.run_read(lambda conn: conn.execute(query.limit(limit)).all())
        return [
            CheckpointRow(
                session_id=r.session_id,
                seq=r.seq,
                kind=r.kind,
                status=r.status,
                turn_id=r.turn_id,
                message_count=r.message_count,
                state=dict(r.state),
                created_at=r.created_at
                if r.created_at.tzinfo
                else r.created_at.replace(tzinfo=UTC),
            )
            for r in reversed(rows)
        ]


def _describe(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"
