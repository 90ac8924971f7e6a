"""SessionTimeline: the append-only history of turns and tool calls (denials too).

Observation, never replayed: nothing rebuilds state from these rows. Payloads are
redacted and size-bounded before they are written, and a failed write is logged and
counted but never raised: observation must not break a run.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog
from sqlalchemy import delete, select
from sqlalchemy.exc import SQLAlchemyError

from geode.store._retry import Backoff, is_transient, retry_transient
from geode.store.models import timeline_table, utcnow
from geode.store.record_redaction import bound, canonical_json, redact

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = ["MAX_PAYLOAD_CHARS", "SessionTimeline", "TimelineRow"]

log = structlog.get_logger(__name__)
_T = timeline_table

# A whole payload above this (as JSON) is replaced by a preview; one oversized tool output
# must not bloat the table every round.
MAX_PAYLOAD_CHARS = 64_000
# Built once: the hot path appends several rows per round. ``inline``: no RETURNING of the
# new id on PostgreSQL (nobody reads it back).
_INSERT = _T.insert().inline()


@dataclass(frozen=True, kw_only=True)
class TimelineRow:
    id: int
    session_id: str
    turn_id: str
    kind: str
    correlation_id: str
    payload: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None


def prepare_payload(payload: dict[str, Any] | None, secrets: tuple[str, ...]) -> dict[str, Any]:
    """Redact, then bound, then cap the JSON size of a payload."""
    cleaned = bound(redact(payload or {}, secrets), max_string=8_000, max_items=200)
    text = canonical_json(cleaned)
    if len(text) > MAX_PAYLOAD_CHARS:
        return {"truncated": True, "size": len(text), "preview": text[:4_000]}
    return dict(cleaned) if isinstance(cleaned, dict) else {"value": cleaned}


def _insert(conn: Connection, *, row: dict[str, Any]) -> None:
    conn.execute(_INSERT, row)


def timeline_row(
    *, session_id: str, turn_id: str, kind: str, correlation_id: str = "",
    payload: dict[str, Any] | None, secrets: tuple[str, ...],
) -> dict[str, Any]:
    """One row's values (payload redacted and bounded), for :func:`insert_rows`."""
    return {
        "session_id": session_id,
        "turn_id": turn_id,
        "kind": kind[:64],
        "correlation_id": correlation_id[:100],
        "payload": prepare_payload(payload, secrets),
        "created_at": utcnow(),
    }


def insert_rows(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Append prepared rows inside the caller's (sync) write transaction."""
    if rows:
        conn.execute(_INSERT, rows)


class SessionTimeline:
    """Append-only timeline rows in the store (``store.timeline``)."""

    def __init__(self, *, store: Database) -> None:
        self._store = store
        self.failures = 0  # writes that failed and were dropped (exposed for health checks)
        #: rows written again after a lost connection (strong references to the tasks)
        self._retrying: set[asyncio.Task[None]] = set()

    async def append(
        self,
        *,
        session_id: str,
        turn_id: str,
        kind: str,
        correlation_id: str = "",
        payload: dict[str, Any] | None = None,
    ) -> None:
        """Append one row (e.g. kind ``tool.denied``). Never raises on a store failure."""
        try:
            row = timeline_row(session_id=session_id, turn_id=turn_id, kind=kind,
                               correlation_id=correlation_id, payload=payload,
                               secrets=self._store.secrets)
            await self._store.run_write(functools.partial(_insert, row=row))
        except (SQLAlchemyError, OSError, TypeError, ValueError) as exc:
            self.failures += 1
            log.warning(
                "timeline.append_failed",
                session_id=session_id,
                kind=kind,
                error=type(exc).__name__,
            )

    async def append_many(
        self, *, session_id: str, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Append several rows (``turn_id``, ``kind``, ``payload``, optional
        ``correlation_id``) of one session together. Never raises on a store failure.

        Without waiting for them (``Database.run_write_later``): they are committed with the
        store's next write (a turn's rows with its final answer, or before its tool batch
        with the batch's first tool row), so they cost no transaction of their own; a
        crash before that loses them, as a crash before this call would. :meth:`list`
        reads them all the same. A failed write is counted and logged when it happens."""
        n = len(rows)
        prepared: list[dict[str, Any]] = []

        def failed(exc: Exception) -> None:
            if prepared and is_transient(exc) and self._retry_later(prepared, session_id):
                return  # the database went away: written once it answers
            self.failures += 1
            log.warning("timeline.append_failed", session_id=session_id, rows=n,
                        error=type(exc).__name__)

        try:
            prepared[:] = [timeline_row(session_id=session_id,
                                        turn_id=str(r.get("turn_id", "")),
                                     kind=str(r["kind"]),
                                     correlation_id=str(r.get("correlation_id", "")),
                                     payload=dict(r.get("payload") or {}),
                                     secrets=self._store.secrets) for r in rows]
            await self._store.run_write_later(functools.partial(insert_rows, rows=prepared),
                                              on_error=failed)
        except (SQLAlchemyError, OSError, TypeError, ValueError) as exc:
            failed(exc)

    #: how long rows whose write met a lost connection are retried before they are dropped
    RETRY_FOR_S = 600.0

    def _retry_later(self, rows: list[dict[str, Any]], session_id: str) -> bool:
        """Write ``rows`` again in the background, with backoff, until the store answers
        (at most :attr:`RETRY_FOR_S`). False when no event loop runs here (then dropped).

        A write whose connection broke at COMMIT may have committed: the rows can then
        appear twice, which an observation record tolerates better than a gap."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        deadline = time.monotonic() + self.RETRY_FOR_S

        async def write() -> None:
            try:
                await retry_transient(
                    lambda: self._store.run_write(functools.partial(insert_rows, rows=rows)),
                    what="timeline.append_retrying", deadline=deadline,
                    backoff=Backoff(first=0.5, cap=10.0))
            except Exception as exc:
                self.failures += 1
                log.warning("timeline.append_failed", session_id=session_id, rows=len(rows),
                            error=type(exc).__name__)

        task = loop.create_task(write())
        self._retrying.add(task)
        task.add_done_callback(self._retrying.discard)
        return True

    async def list(self, session_id: str, *, limit: int = 1000) -> list[TimelineRow]:
        """The session's first ``limit`` rows in append order."""
        query = select(_T).where(_T.c.session_id == session_id).order_by(_T.c.id).limit(limit)
        await self._store.flush_later()  # rows appended without waiting: committed first
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return [
            TimelineRow(
                id=r.id,
                session_id=r.session_id,
                turn_id=r.turn_id,
                kind=r.kind,
                correlation_id=r.correlation_id,
                payload=dict(r.payload),
                created_at=r.created_at
                if r.created_at.tzinfo
                else r.created_at.replace(tzinfo=UTC),
            )
            for r in rows
        ]

    async def prune(self, older_than_days: float) -> int:
        """Delete rows older than the retention; returns how many were deleted."""
        cutoff = utcnow() - timedelta(days=older_than_days)
        query = delete(_T).where(_T.c.created_at < cutoff)
        deleted = await self._store.run_write(lambda conn: int(conn.execute(query).rowcount or 0))
        log.info("timeline.pruned", deleted=deleted, older_than_days=older_than_days)
        return deleted
