"""The checkpoint chain: messages + loop state + guard counters, the only thing ever restored.

Every save is one write transaction that appends a checkpoint row, writes the messages
that changed since this process's previous save, and moves the session's head
(``last_seq``, ``message_count``, ``status``). Messages are diffed against what this
checkpointer last wrote, so a round of a 500-message session writes one or two rows; a
rewrite (compaction) or a chain moved by another writer falls back to rewriting the rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog
from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from geode.errors import CheckpointSaveError, StoreError
from geode.loop.protocols import BatchSaveFailed, TurnInfo
from geode.messages import Message
from geode.store.models import checkpoints_table, messages_table, sessions_table, utcnow
from geode.store.sessions import SessionNotFoundError, check_transition

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from geode.store.engine import Store

__all__ = ["CheckpointRow", "CheckpointStore", "Restored", "SessionCheckpointer"]

log = structlog.get_logger(__name__)

_S, _M, _C = sessions_table, messages_table, checkpoints_table


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
    """What this checkpointer last committed: the chain head and the messages it covers."""

    seq: int
    messages: tuple[Message, ...]


def _first_difference(old: Sequence[Message], new: Sequence[Message]) -> int:
    # Identity first: the loop appends to the same list, so unchanged messages are the
    # very same (frozen) objects and the scan costs a pointer compare each.
    limit = min(len(old), len(new))
    for i in range(limit):
        if old[i] is not new[i] and old[i] != new[i]:
            return i
    return limit


class SessionCheckpointer:
    """The checkpoint chain of one session; implements ``geode.loop.protocols.Checkpointer``.

    Build it with ``store.checkpointer(session_id)``; the session row must exist
    (``store.sessions.create`` / ``ensure``).
    """

    def __init__(self, *, store: Store, session_id: str) -> None:
        self._store = store
        self.session_id = session_id
        self._written: _Written | None = None

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
            async with self._store.read() as conn:
                head = (
                    await conn.execute(
                        select(_S.c.status, _S.c.last_seq).where(_S.c.id == self.session_id)
                    )
                ).first()
                if head is None or head.last_seq == 0:
                    return None
                cp = (
                    await conn.execute(
                        select(_C.c.seq, _C.c.kind, _C.c.turn_id, _C.c.message_count, _C.c.state)
                        .where(_C.c.session_id == self.session_id)
                        .order_by(_C.c.seq.desc())
                        .limit(1)
                    )
                ).first()
                if cp is None:
                    return None
                payloads = (
                    (
                        await conn.execute(
                            select(_M.c.payload)
                            .where(_M.c.session_id == self.session_id, _M.c.idx < cp.message_count)
                            .order_by(_M.c.idx)
                        )
                    )
                    .scalars()
                    .all()
                )
        except SQLAlchemyError as exc:
            raise StoreError(
                f"loading session {self.session_id!r} failed: {_describe(exc)}"
            ) from exc
        if len(payloads) != cp.message_count:
            raise StoreError(
                f"the checkpoint chain of session {self.session_id!r} is broken: checkpoint "
                f"{cp.seq} covers {cp.message_count} messages, the store holds {len(payloads)}"
            )
        messages = [Message.model_validate(p) for p in payloads]
        self._written = _Written(seq=cp.seq, messages=tuple(messages))
        return Restored(
            messages=messages,
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
        try:
            async with self._store.write() as conn:
                seq = await self._write_link(conn, snapshot, state_json, status, kind, turn_id)
        except BaseException:
            # The transaction rolled back; what this process believes is in the store
            # may be stale now, so the next save rewrites the rows from scratch.
            self._written = None
            raise
        self._written = _Written(seq=seq, messages=snapshot)

    async def _write_link(
        self,
        conn: AsyncConnection,
        messages: tuple[Message, ...],
        state: dict[str, Any],
        status: str | None,
        kind: str,
        turn_id: str,
    ) -> int:
        head_q = select(_S.c.status, _S.c.last_seq, _S.c.message_count).where(
            _S.c.id == self.session_id
        )
        if self._store.is_postgres:
            head_q = head_q.with_for_update()
        head = (await conn.execute(head_q)).first()
        if head is None:
            raise SessionNotFoundError(self.session_id)
        # A batch on a finished session is refused like any illegal transition.
        check_transition(self.session_id, head.status, status or "active")
        new_status = status or head.status

        written = self._written
        if (
            written is not None
            and written.seq == head.last_seq
            and len(written.messages) == head.message_count
        ):
            keep = _first_difference(written.messages, messages)
            stored = len(written.messages)
        else:
            keep, stored = 0, head.message_count
        if keep < stored:
            await conn.execute(
                delete(_M).where(_M.c.session_id == self.session_id, _M.c.idx >= keep)
            )
        now = utcnow()
        if keep < len(messages):
            await conn.execute(
                insert(_M),
                [
                    {
                        "session_id": self.session_id,
                        "idx": i,
                        "payload": messages[i].model_dump(mode="json"),
                        "created_at": now,
                    }
                    for i in range(keep, len(messages))
                ],
            )
        seq = int(head.last_seq) + 1
        await conn.execute(
            insert(_C).values(
                session_id=self.session_id,
                seq=seq,
                kind=kind,
                status=new_status,
                turn_id=turn_id,
                message_count=len(messages),
                state=state,
                created_at=now,
            )
        )
        await conn.execute(
            update(_S)
            .where(_S.c.id == self.session_id)
            .values(last_seq=seq, message_count=len(messages), status=new_status, updated_at=now)
        )
        return seq


class CheckpointStore:
    """Read access to checkpoint chains (``geode sessions show``)."""

    def __init__(self, *, store: Store) -> None:
        self._store = store

    async def list(self, session_id: str, *, limit: int = 100) -> list[CheckpointRow]:
        """The newest ``limit`` checkpoints, oldest first."""
        async with self._store.read() as conn:
            rows = (
                await conn.execute(
                    select(_C)
                    .where(_C.c.session_id == session_id)
                    .order_by(_C.c.seq.desc())
                    .limit(limit)
                )
            ).all()
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
