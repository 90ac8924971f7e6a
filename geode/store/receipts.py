"""Effect receipts: the durable record that an effectful call is about to run, and how it ended.

``intend`` commits before the executor dispatches; a crash after it leaves an ``intended``
receipt, which the next resume turns into ``uncertain``. An uncertain effect is never
re-executed automatically: the model is told the outcome is unknown and must be checked.
``(session_id, call_id)`` is unique, so the same call cannot be intended (and so dispatched) twice.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import structlog
from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from geode.errors import StoreError
from geode.secret_redaction import redact_text
from geode.store.models import receipts_table, utcnow

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = ["DuplicateReceiptError", "Receipt", "ReceiptStore", "UnknownReceiptError"]

log = structlog.get_logger(__name__)
_R = receipts_table

FinishStatus = Literal["done", "failed", "uncertain"]
# Which finished states a receipt may move to from each state. ``uncertain`` -> done /
# failed is reconciliation (someone checked the outside world).
_NEXT: dict[str, frozenset[str]] = {
    "intended": frozenset({"done", "failed", "uncertain"}),
    "uncertain": frozenset({"done", "failed", "uncertain"}),
    "done": frozenset({"done"}),
    "failed": frozenset({"failed"}),
}


# A receipt in one of these states may be re-armed for a deliberate retry (see intend).
_RETRYABLE = frozenset({"uncertain", "failed"})


class DuplicateReceiptError(StoreError):
    """A receipt for this call id exists: dispatching it again could repeat the effect."""


class UnknownReceiptError(StoreError):
    """``finish`` for a call id that was never intended, or an illegal status move."""


@dataclass(frozen=True, kw_only=True)
class Receipt:
    session_id: str
    turn_id: str
    call_id: str
    tool: str
    args_hash: str
    status: str
    detail: str
    created_at: datetime
    updated_at: datetime
    #: the channel approver who said yes to the call (platform id, display name)
    approved_by: str = ""
    approved_by_name: str = ""

    @classmethod
    def from_row(cls, row: Any) -> Receipt:
        return cls(
            session_id=row.session_id,
            turn_id=row.turn_id,
            call_id=row.call_id,
            tool=row.tool,
            args_hash=row.args_hash,
            status=row.status,
            detail=row.detail,
            created_at=_aware(row.created_at),
            updated_at=_aware(row.updated_at),
            approved_by=row.approved_by or "",
            approved_by_name=row.approved_by_name or "",
        )


def _aware(ts: datetime) -> datetime:
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


_COLS = (
    _R.c.session_id,
    _R.c.turn_id,
    _R.c.call_id,
    _R.c.tool,
    _R.c.args_hash,
    _R.c.status,
    _R.c.detail,
    _R.c.created_at,
    _R.c.updated_at,
    _R.c.approved_by,
    _R.c.approved_by_name,
)


# The hot path's statements, built once (intend and finish run around every effectful call).
_WHERE_CALL = (_R.c.session_id == bindparam("b_sid"), _R.c.call_id == bindparam("b_call"))
_FIND = select(_R.c.status, _R.c.args_hash).where(*_WHERE_CALL)
_FIND_LOCKED = _FIND.with_for_update()
_INSERT = _R.insert().inline()  # inline: no RETURNING of the new id on PostgreSQL
_SET = update(_R).where(*_WHERE_CALL)  # SET columns come from the parameters


class ReceiptStore:
    """Effect receipts, written by the executor (step 7 of the tool boundary)."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    async def intend(
        self, *, session_id: str, turn_id: str, call_id: str, tool: str, args_hash: str,
        approved_by: str = "", approved_by_name: str = "",
    ) -> None:
        """Record that ``call_id`` is about to run. Committed (durable) when this returns.

        A call that already has a receipt is refused (:class:`DuplicateReceiptError`),
        except a deliberate retry: a receipt left ``uncertain`` or ``failed`` for the same
        arguments is re-armed to ``intended``. Only the resume path re-submits such a
        call, and only for idempotent tools; ``done`` and in-flight ``intended``
        receipts are never re-armed. ``approved_by`` / ``approved_by_name`` name the
        channel approver who said yes (the audit of who allowed the effect).

        Raises:
            DuplicateReceiptError: a receipt for ``call_id`` exists and may not re-run.
            StoreError: the write failed; the executor must not dispatch.
        """
        now = utcnow()
        postgres = self._store.is_postgres

        def record(conn: Connection) -> str | None:
            """Insert or re-arm the receipt; returns the status it was re-armed from."""
            key = {"b_sid": session_id, "b_call": call_id}
            existing = conn.execute(_FIND_LOCKED if postgres else _FIND, key).first()
            if existing is None:
                conn.execute(
                    _INSERT,
                    {
                        "session_id": session_id,
                        "turn_id": turn_id,
                        "call_id": call_id,
                        "tool": tool,
                        "args_hash": args_hash,
                        "status": "intended",
                        "detail": "",
                        "created_at": now,
                        "updated_at": now,
                        "approved_by": approved_by[:100] or None,
                        "approved_by_name": approved_by_name[:200] or None,
                    },
                )
                return None
            if existing.status not in _RETRYABLE or existing.args_hash != args_hash:
                raise DuplicateReceiptError(
                    f"call {call_id!r} ({tool}) already has an effect receipt "
                    f"({existing.status}); it is not run again"
                )
            conn.execute(
                _SET,
                {
                    **key,
                    "status": "intended",
                    "turn_id": turn_id,
                    "detail": f"retry after {existing.status}",
                    "updated_at": now,
                    "approved_by": approved_by[:100] or None,
                    "approved_by_name": approved_by_name[:200] or None,
                },
            )
            return str(existing.status)

        try:
            was = await self._store.run_write(record)
        except IntegrityError as exc:  # a concurrent intend of the same call won the insert
            raise DuplicateReceiptError(
                f"call {call_id!r} ({tool}) already has an effect receipt; it is not run again"
            ) from exc
        except SQLAlchemyError as exc:
            raise StoreError(
                f"recording the effect receipt of call {call_id!r} failed: {type(exc).__name__}"
            ) from exc
        if was is not None:
            log.warning("receipts.retry", call_id=call_id, tool=tool, was=was)

    async def finish(
        self, *, session_id: str, call_id: str, status: FinishStatus, detail: str = ""
    ) -> None:
        """Record how an intended call ended.

        Raises:
            UnknownReceiptError: no receipt for ``call_id``, or it is already finished
                with another status.
            StoreError: the write failed (the receipt stays ``intended`` and a resume
                will mark it ``uncertain``, which is the truth from the store's view).
        """
        postgres = self._store.is_postgres

        def move(conn: Connection) -> None:
            key = {"b_sid": session_id, "b_call": call_id}
            current = conn.execute(_FIND_LOCKED if postgres else _FIND, key).scalar()
            if current is None:
                raise UnknownReceiptError(f"no effect receipt for call {call_id!r}")
            if status not in _NEXT[current]:
                raise UnknownReceiptError(
                    f"effect receipt of call {call_id!r} is {current}; cannot become {status}"
                )
            conn.execute(
                _SET, {**key, "status": status, "detail": redact_text(detail)[:4000],
                       "updated_at": utcnow()}
            )

        try:
            await self._store.run_write(move)
        except SQLAlchemyError as exc:
            raise StoreError(
                f"finishing the effect receipt of call {call_id!r} failed: {type(exc).__name__}"
            ) from exc

    async def mark_uncertain_open(self, session_id: str) -> list[Receipt]:
        """On resume: every ``intended`` receipt of the session becomes ``uncertain``.

        Returns the receipts changed, oldest first, so the loop can tell the model which
        effects have an unknown outcome (they are never re-run automatically).
        """
        marked, _ = await self._resume(session_id, listing=False)
        return marked

    async def resume(self, session_id: str) -> tuple[list[Receipt], dict[str, str]]:
        """:meth:`mark_uncertain_open` and then every receipt's status by call id, in one
        transaction (what opening an existing session needs)."""
        return await self._resume(session_id, listing=True)

    async def _resume(
        self, session_id: str, *, listing: bool
    ) -> tuple[list[Receipt], dict[str, str]]:
        now = utcnow()
        detail = "process ended after dispatch; outcome unknown (not re-run)"
        postgres = self._store.is_postgres
        every = select(_R.c.call_id, _R.c.status).where(_R.c.session_id == session_id)

        def mark(conn: Connection) -> tuple[list[Any], dict[str, str]]:
            query = (
                select(*_COLS)
                .where(_R.c.session_id == session_id, _R.c.status == "intended")
                .order_by(_R.c.id)
            )
            if postgres:
                query = query.with_for_update()
            rows = list(conn.execute(query).all())
            if rows:
                conn.execute(
                    update(_R)
                    .where(
                        _R.c.session_id == session_id,
                        _R.c.call_id.in_([r.call_id for r in rows]),
                    )
                    .values(status="uncertain", detail=detail, updated_at=now)
                )
            statuses = ({str(r.call_id): str(r.status) for r in conn.execute(every)}
                        if listing else {})
            return rows, statuses

        rows, statuses = await self._store.run_write(mark)
        if not rows:
            return [], statuses
        out = [
            dataclasses.replace(
                Receipt.from_row(r), status="uncertain", detail=detail, updated_at=now
            )
            for r in rows
        ]
        log.warning(
            "receipts.marked_uncertain",
            session_id=session_id,
            calls=[r.call_id for r in out],
        )
        return out, statuses

    async def list_for(self, session_id: str) -> list[Receipt]:
        """Every receipt of the session, oldest first."""
        query = select(*_COLS).where(_R.c.session_id == session_id).order_by(_R.c.id)
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return [Receipt.from_row(r) for r in rows]

    async def get(self, session_id: str, call_id: str) -> Receipt | None:
        query = select(*_COLS).where(_R.c.session_id == session_id, _R.c.call_id == call_id)
        row = await self._store.run_read(lambda conn: conn.execute(query).first())
        return Receipt.from_row(row) if row is not None else None
