"""What the layer received of each inbound event's attachments, in ``channel_attachments``.

A row is written once per (event, attachment index), *after* the file is complete on disk
(fsynced, renamed into the thread's folder, the folder fsynced) or after the layer refused
it. A recovered turn reads the rows instead of asking the platform again: a saved file is
not downloaded twice, a refused one stays refused with the same reason. The first row
written wins (two replicas racing over one event keep one record). A voice note's transcript
is added to its row once transcribed (:meth:`AttachmentRecords.set_transcript`): the record,
not a file in the thread's folder the model's tools can write, is what a recovered turn
shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import select, update

from bots.store._sql import insert_ignore
from bots.store._tables import attachments_table
from geode.store.models import utcnow

if TYPE_CHECKING:
    from datetime import datetime

    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = ["AttachmentRecord", "AttachmentRecords", "AttachmentStatus"]

_T = attachments_table

AttachmentStatus = Literal["saved", "refused"]


@dataclass(frozen=True, kw_only=True)
class AttachmentRecord:
    event_id: int
    idx: int
    status: AttachmentStatus
    session_id: str = ""
    platform: str = ""
    #: the platform's file id (or URL) as the event carried it
    file_ref: str = ""
    name: str = ""
    mime: str = ""
    #: why it was refused (the words the user was told)
    reason: str = ""
    #: relative to the binding's workspace ("" when refused)
    path: str = ""
    size: int = 0
    sha256: str = ""
    #: a voice note's transcript (None: not transcribed, or before the record kept it)
    transcript: str | None = None
    created_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "index": self.idx, "name": self.name,
                "mime": self.mime, "status": self.status, "reason": self.reason,
                "path": self.path, "size": self.size, "sha256": self.sha256,
                # a URL's query (Discord signs its attachment links there) is not shown
                "file_ref": self.file_ref.split("?", 1)[0],
                "transcript": self.transcript,
                "at": self.created_at.isoformat() if self.created_at else None}


def _record(row: Any) -> AttachmentRecord:
    return AttachmentRecord(
        event_id=int(row.event_id), idx=int(row.idx), status=row.status,
        session_id=row.session_id, platform=row.platform, file_ref=row.file_ref,
        name=row.name, mime=row.mime, reason=row.reason, path=row.path, size=int(row.size),
        sha256=row.sha256, transcript=row.transcript, created_at=row.created_at)


class AttachmentRecords:
    """The ``channel_attachments`` table."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    async def add(self, rec: AttachmentRecord) -> AttachmentRecord:
        """Record ``rec`` unless its (event, index) has a record already; returns the record
        that holds (the earlier one, if any)."""
        stmt = insert_ignore(self._store, _T, ["event_id", "idx"])
        values = {"event_id": rec.event_id, "idx": rec.idx, "session_id": rec.session_id,
                  "platform": rec.platform, "file_ref": rec.file_ref, "name": rec.name[:300],
                  "mime": rec.mime[:200], "status": rec.status, "reason": rec.reason,
                  "path": rec.path, "size": rec.size, "sha256": rec.sha256,
                  "created_at": utcnow()}
        query = select(_T).where(_T.c.event_id == rec.event_id, _T.c.idx == rec.idx)

        def add(conn: Connection) -> AttachmentRecord:
            conn.execute(stmt, values)
            return _record(conn.execute(query).one())

        return await self._store.run_write(add)

    async def set_transcript(self, event_id: int, idx: int, text: str) -> str:
        """Keep the transcript of a saved voice note; returns the one that holds (the first
        written: two replicas racing over one event keep one, and the user is shown it)."""
        stmt = (update(_T).where(_T.c.event_id == event_id, _T.c.idx == idx,
                                 _T.c.transcript.is_(None))
                .values(transcript=text))
        query = select(_T.c.transcript).where(_T.c.event_id == event_id, _T.c.idx == idx)

        def write(conn: Connection) -> str:
            conn.execute(stmt)
            held = conn.execute(query).scalar_one_or_none()
            return text if held is None else str(held)

        return await self._store.run_write(write)

    async def for_event(self, event_id: int) -> dict[int, AttachmentRecord]:
        """The event's records by attachment index."""
        query = select(_T).where(_T.c.event_id == event_id)
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return {int(r.idx): _record(r) for r in rows}

    async def for_session(self, session_id: str) -> list[AttachmentRecord]:
        """Everything received in a session's threads, oldest first."""
        query = (select(_T).where(_T.c.session_id == session_id)
                 .order_by(_T.c.event_id, _T.c.idx))
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return [_record(r) for r in rows]
