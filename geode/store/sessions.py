"""Session rows and the status automaton.

::

    active <-> paused          (and either may end)
    active | paused -> completed | error
    completed | error -> active   only through reopen()

``completed`` and ``error`` are terminal: a new turn on a finished session is an explicit
``reopen`` (the session factory does it when a thread continues), so a stray late save
cannot silently resurrect a session that was closed.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from geode.errors import StoreError
from geode.secret_redaction import redact_text
from geode.store.models import SESSION_STATUSES, sessions_table, utcnow

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = [
    "IllegalTransitionError",
    "SessionExistsError",
    "SessionNotFoundError",
    "SessionRecord",
    "SessionStore",
    "check_transition",
    "short_title",
]

_TERMINAL = frozenset({"completed", "error"})


class IllegalTransitionError(StoreError):
    """A status change the automaton does not allow."""

    def __init__(self, session_id: str, current: str, target: str) -> None:
        hint = (
            f" Reopen it first (store.sessions.reopen({session_id!r}))."
            if current in _TERMINAL
            else ""
        )
        super().__init__(f"session {session_id!r} cannot go from {current} to {target}.{hint}")
        self.session_id = session_id
        self.current = current
        self.target = target


class SessionNotFoundError(StoreError):
    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"no session {session_id!r} in the store; `geode sessions list` shows the ids"
        )
        self.session_id = session_id


class SessionExistsError(StoreError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"a session {session_id!r} already exists")
        self.session_id = session_id


def check_transition(session_id: str, current: str, target: str) -> None:
    """Raise :class:`IllegalTransitionError` unless ``current -> target`` is legal.

    Staying in the same status is always legal (a save in the middle of a turn).
    """
    if target not in SESSION_STATUSES:
        raise IllegalTransitionError(session_id, current, target)
    if current == target:
        return
    if current in _TERMINAL:
        raise IllegalTransitionError(session_id, current, target)


def short_title(prompt: str, width: int = 60) -> str:
    """A prompt as a one-line session title: credentials masked (before the cut, so no
    part of a key is left), whitespace collapsed, cut at ``width``."""
    line = " ".join(redact_text(prompt).split())
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"


def _aware(ts: datetime) -> datetime:
    # SQLite hands back naive datetimes; every timestamp we write is UTC.
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


@dataclass(frozen=True, kw_only=True)
class SessionRecord:
    id: str
    created_at: datetime
    updated_at: datetime
    status: str
    model: str
    mode: str
    title: str
    parent_session_id: str | None
    metadata: dict[str, Any] = field(default_factory=dict)
    message_count: int = 0
    last_seq: int = 0

    @classmethod
    def from_row(cls, row: Any) -> SessionRecord:
        return cls(
            id=row.id,
            created_at=_aware(row.created_at),
            updated_at=_aware(row.updated_at),
            status=row.status,
            model=row.model,
            mode=row.mode,
            title=row.title,
            parent_session_id=row.parent_session_id,
            metadata=dict(row._mapping["metadata"] or {}),
            message_count=row.message_count,
            last_seq=row.last_seq,
        )


_T = sessions_table
_COLUMNS = (
    _T.c.id,
    _T.c.created_at,
    _T.c.updated_at,
    _T.c.status,
    _T.c.model,
    _T.c.mode,
    _T.c.title,
    _T.c.parent_session_id,
    _T.c["metadata"],
    _T.c.message_count,
    _T.c.last_seq,
)


class SessionStore:
    """Create, look up and move sessions through the status automaton."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    async def create(
        self,
        session_id: str | None = None,
        *,
        mode: str,
        model: str,
        parent_session_id: str | None = None,
        title: str = "",
        metadata: dict[str, Any] | None = None,
        if_missing: bool = False,
        also: Callable[[Connection], None] | None = None,
    ) -> str:
        """Insert a new active session and return its id (a new uuid4 hex if not given).

        ``if_missing``: an existing id is told by the insert itself (``ON CONFLICT DO
        NOTHING``), so no failed INSERT aborts the transaction. ``also``: a read run first
        in the same transaction, whatever the outcome (what a session's opening reads with
        its load: its memory, :class:`geode.memory.MemoryRead`).

        Raises:
            SessionExistsError: the id is taken.
            SessionNotFoundError: ``parent_session_id`` names no session.
        """
        sid = session_id or uuid.uuid4().hex
        now = utcnow()
        row = {
            "id": sid,
            "created_at": now,
            "updated_at": now,
            "status": "active",
            "model": model,
            "mode": mode,
            "title": redact_text(title),  # at rest: no credential (issue #30)
            "parent_session_id": parent_session_id,
            "metadata": metadata or {},
            "last_seq": 0,
            "message_count": 0,
        }

        # ``if_missing``: the insert itself tells (ON CONFLICT DO NOTHING returns no row),
        # one statement instead of a look-up and the insert.
        if_missing_stmt = _insert_if_missing(self._store.is_postgres)

        def insert(conn: Connection) -> None:
            if also is not None:
                also(conn)
            if parent_session_id is not None and not _exists(conn, parent_session_id):
                raise SessionNotFoundError(parent_session_id)
            if not if_missing:
                conn.execute(_INSERT, row)  # an existing id: IntegrityError
            elif conn.execute(if_missing_stmt, row).first() is None:
                raise SessionExistsError(sid)

        try:
            await self._store.run_write(insert)
        except IntegrityError as exc:
            raise SessionExistsError(sid) from exc
        except SQLAlchemyError as exc:
            raise StoreError(f"creating session {sid!r} failed: {type(exc).__name__}") from exc
        return sid

    async def create_if_missing(
        self,
        session_id: str,
        *,
        mode: str,
        model: str,
        parent_session_id: str | None = None,
        title: str = "",
        metadata: dict[str, Any] | None = None,
        also: Callable[[Connection], None] | None = None,
    ) -> bool:
        """Create the session unless it exists, in one transaction; True if created.
        ``also`` as in :meth:`create`.

        Raises:
            SessionNotFoundError: ``parent_session_id`` names no session.
        """
        try:
            await self.create(session_id, mode=mode, model=model,
                              parent_session_id=parent_session_id, title=title,
                              metadata=metadata, if_missing=True, also=also)
        except SessionExistsError:
            return False
        return True

    async def ensure(
        self,
        session_id: str,
        *,
        mode: str,
        model: str,
        parent_session_id: str | None = None,
        title: str = "",
        metadata: dict[str, Any] | None = None,
    ) -> SessionRecord:
        """Get the session, creating it if it does not exist (fixed ids: thread -> session)."""
        existing = await self.get(session_id)
        if existing is not None:
            return existing
        try:
            await self.create(
                session_id,
                mode=mode,
                model=model,
                parent_session_id=parent_session_id,
                title=title,
                metadata=metadata,
            )
        except SessionExistsError:
            pass  # created concurrently by another replica: theirs is as good as ours
        record = await self.get(session_id)
        assert record is not None
        return record

    async def get(self, session_id: str) -> SessionRecord | None:
        query = select(*_COLUMNS).where(_T.c.id == session_id)
        row = await self._store.run_read(lambda conn: conn.execute(query).first())
        return SessionRecord.from_row(row) if row is not None else None

    async def exists(self, session_id: str) -> bool:
        return await self._store.run_read(lambda conn: _exists(conn, session_id))

    async def list(self, limit: int = 50, *, status: str | None = None) -> list[SessionRecord]:
        """Most recently updated first."""
        query = select(*_COLUMNS).order_by(_T.c.updated_at.desc(), _T.c.id).limit(limit)
        if status is not None:
            query = query.where(_T.c.status == status)
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return [SessionRecord.from_row(r) for r in rows]

    async def latest_in(self, workspace: str, *, source: str) -> SessionRecord | None:
        """The most recently updated session of ``source`` whose workspace is ``workspace``
        (``geode run -c``: this workspace's last session)."""
        meta = _T.c["metadata"]
        query = (
            select(*_COLUMNS)
            .where(meta["workspace"].as_string() == workspace,
                   meta["source"].as_string() == source)
            .order_by(_T.c.updated_at.desc(), _T.c.id)
            .limit(1)
        )
        row = await self._store.run_read(lambda conn: conn.execute(query).first())
        return SessionRecord.from_row(row) if row is not None else None

    async def title_if_untitled(self, session_id: str, title: str) -> None:
        """Give the session ``title`` unless it has one (its first prompt, for the list)."""
        stmt = (
            update(_T)
            .where(_T.c.id == session_id, _T.c.title == "")
            .values(title=redact_text(title))  # at rest: no credential (issue #30)
        )
        await self._store.run_write(lambda conn: conn.execute(stmt))

    async def count(self) -> int:
        query = select(func.count()).select_from(_T)
        return await self._store.run_read(lambda conn: int(conn.execute(query).scalar_one()))

    async def set_status(self, session_id: str, status: str) -> None:
        """Move the session to ``status``; illegal moves raise :class:`IllegalTransitionError`."""
        postgres = self._store.is_postgres

        def move(conn: Connection) -> None:
            current = lock_status_sync(conn, session_id, postgres=postgres)
            check_transition(session_id, current, status)
            conn.execute(
                update(_T).where(_T.c.id == session_id).values(status=status, updated_at=utcnow())
            )

        await self._store.run_write(move)

    async def reopen(self, session_id: str) -> None:
        """The explicit way out of ``completed`` / ``error``: back to ``active``."""
        postgres = self._store.is_postgres

        def reopen(conn: Connection) -> None:
            lock_status_sync(conn, session_id, postgres=postgres)
            conn.execute(
                update(_T).where(_T.c.id == session_id).values(status="active", updated_at=utcnow())
            )

        await self._store.run_write(reopen)


# Built once: building and cache-keying a statement costs about what SQLite takes to run it.
_INSERT = _T.insert()
_EXISTS = select(_T.c.id).where(_T.c.id == bindparam("b_id"))


@functools.cache
def _insert_if_missing(postgres: bool) -> Any:
    """``INSERT ... ON CONFLICT (id) DO NOTHING RETURNING id`` of the store's dialect: a
    session row that exists is left alone and no row comes back (an INSERT's rowcount is
    not reliable across drivers: psycopg through SQLAlchemy reports -1)."""
    if postgres:  # imported only by a PostgreSQL store (~3 MB a SQLite daemon never needs)
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(_T).on_conflict_do_nothing(index_elements=[_T.c.id]).returning(_T.c.id)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(_T).on_conflict_do_nothing(index_elements=[_T.c.id]).returning(_T.c.id)


def _exists(conn: Connection, session_id: str) -> bool:
    return conn.execute(_EXISTS, {"b_id": session_id}).first() is not None


def lock_status_sync(conn: Connection, session_id: str, *, postgres: bool) -> str:
    """:func:`lock_status` inside :meth:`Database.run_write` (a sync connection)."""
    query = select(_T.c.status).where(_T.c.id == session_id)
    if postgres:
        query = query.with_for_update()
    row = conn.execute(query).first()
    if row is None:
        raise SessionNotFoundError(session_id)
    return str(row.status)


async def lock_status(conn: Any, session_id: str, *, postgres: bool) -> str:
    """Read the session's status under a row lock (PostgreSQL) / the write lock (SQLite)."""
    query = select(_T.c.status).where(_T.c.id == session_id)
    if postgres:
        query = query.with_for_update()
    row = (await conn.execute(query)).first()
    if row is None:
        raise SessionNotFoundError(session_id)
    return str(row.status)
