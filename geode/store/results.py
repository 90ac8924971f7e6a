"""Kept tool results: the whole (redacted) text of a result that was over the size limit.

The executor keeps it before the model sees the cut (head + tail + the result id); the
``read_result`` tool reads a slice of it back, and only from the session that made it: a
result id of another session reads as unknown.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sqlalchemy import delete, select

from geode.store.models import kept_results_table

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = ["KeptResultStore"]

_K = kept_results_table


class KeptResultStore:
    """The ``kept_results`` table (implements the executor's ``ResultKeeper``)."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    async def keep(
        self, *, result_id: str, session_id: str, turn_id: str, call_id: str, tool: str,
        text: str,
    ) -> None:
        """Store ``text`` (already redacted) as ``result_id``; committed when this returns."""
        row = {"id": result_id, "session_id": session_id, "turn_id": turn_id,
               "call_id": call_id, "tool": tool, "at": int(time.time() * 1000),
               "chars": len(text), "text": text}

        def write(conn: Connection) -> None:
            conn.execute(_K.insert(), row)

        await self._store.run_write(write)

    async def read(self, *, session_id: str, result_id: str) -> str | None:
        """The whole kept text, or None when ``result_id`` is not one of this session's."""
        query = select(_K.c.text).where(_K.c.id == result_id, _K.c.session_id == session_id)

        def read(conn: Connection) -> str | None:
            return conn.execute(query).scalar_one_or_none()

        return await self._store.run_read(read)

    async def prune(self, older_than_days: float) -> int:
        """Delete results kept longer than the retention (``[store] timeline_retention_days``);
        a later ``read_result`` of one says it is unknown. Returns how many were deleted."""
        cutoff = int((time.time() - older_than_days * 86_400) * 1000)
        query = delete(_K).where(_K.c.at < cutoff)
        return await self._store.run_write(lambda conn: int(conn.execute(query).rowcount or 0))
