"""Memory entries: the ``memory_entries`` rows the ``memory`` tool, ``/memory`` / ``/forget``
and ``geode memory`` read and write.

:class:`MemoryStore` holds every SQL statement on the table. Each write goes in one
transaction with its timeline row (who caused it, in which session), so an entry never
changes without its record. The owner of an entry is always given by the caller that knows
it (the host's identity of the person speaking, the binding): nothing here takes it from the
entry's text or a model's arguments.
"""

from __future__ import annotations

import builtins
import functools
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import structlog
from sqlalchemy import (
    BigInteger,
    BindParameter,
    Index,
    String,
    Table,
    Text,
    and_,
    bindparam,
    delete,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Mapped, mapped_column

from geode.secret_redaction import redact_text
from geode.store.models import Base
from geode.store.timeline import insert_rows, timeline_row

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = ["MemoryAudit", "MemoryEntry", "MemoryEntryModel", "MemoryRows", "MemoryScopeName",
           "MemoryStore", "count_use", "memory_table", "new_entry_id", "read_rows"]

log = structlog.get_logger(__name__)


# On the harness's metadata beside its other tables (``geode.store`` imports this module, so
# the schema the migrations are checked against always holds it).
class MemoryEntryModel(Base):
    """One remembered fact (:class:`geode.store.memory.MemoryStore`): ``scope`` "user" (about
    one person: ``owner`` is ``platform:user_id``) or "channel" (for everyone in a binding:
    ``owner`` is ``platform:channel``). Who wrote it and in which session are kept for the
    audit; ``use_count`` / ``last_used_at`` (Unix ms) count the turns whose prompt held it."""

    __tablename__ = "memory_entries"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    scope: Mapped[str] = mapped_column(String(16))
    owner: Mapped[str] = mapped_column(String(300))
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[int] = mapped_column(BigInteger)
    #: ``platform:user_id`` of who caused the write (or ``cli``)
    created_by: Mapped[str] = mapped_column(String(300), default="")
    updated_by: Mapped[str] = mapped_column(String(300), default="")
    #: the session whose turn wrote it ("" from the CLI)
    session_id: Mapped[str] = mapped_column(String(200), default="")
    use_count: Mapped[int] = mapped_column(BigInteger, default=0)
    last_used_at: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (Index(None, "scope", "owner"),)


memory_table = cast(Table, MemoryEntryModel.__table__)
_M = memory_table
# Built once: every channel turn with memory on runs both (building a statement costs more
# than running it on SQLite). The columns a prompt's block depends on come first, the use
# counts (which change every turn) last: ``MemoryRows.content`` is the rows without them.
_USE_COLUMNS = ("use_count", "last_used_at")
_FOR_OWNERS = select(
    *(c for c in _M.c if c.name not in _USE_COLUMNS), *(_M.c[n] for n in _USE_COLUMNS),
).where(or_(
    and_(_M.c.scope == bindparam("s1"), _M.c.owner == bindparam("o1")),
    and_(_M.c.scope == bindparam("s2"), _M.c.owner == bindparam("o2")),
)).order_by(_M.c.created_at, _M.c.id)


@functools.cache
def _touch(size: int) -> Any:
    """The use count's UPDATE for up to ``size`` ids (a power of two), one bound parameter
    per id: an expanding ``IN`` is compiled again on every execution, and every turn with
    memory on runs this one (the unused slots repeat the last id)."""
    ids: list[BindParameter[str]] = [bindparam(f"i{n}") for n in range(size)]
    return (update(_M).where(_M.c.id.in_(ids))
            .values(use_count=_M.c.use_count + 1, last_used_at=bindparam("now")))


def _touch_params(entry_ids: Sequence[str]) -> tuple[Any, dict[str, Any]]:
    size = 1 << max(0, len(entry_ids) - 1).bit_length()
    padded = [*entry_ids, *[entry_ids[-1]] * (size - len(entry_ids))]
    return _touch(size), {"now": _now_ms(), **{f"i{n}": v for n, v in enumerate(padded)}}


def count_use(conn: Connection, entry_ids: Sequence[str]) -> None:
    """Count one more use of each entry, in the caller's transaction (a turn's checkpoint
    save: :meth:`geode.memory.SessionMemory.count_use`). One UPDATE by primary key; on
    PostgreSQL it locks the rows until that transaction commits, always in the index's order
    (an ``IN`` list is scanned sorted), so two turns counting the same channel entries wait
    for each other briefly and never deadlock."""
    if entry_ids:
        stmt, params = _touch_params(entry_ids)
        conn.execute(stmt, params)


def read_rows(conn: Connection, owners: Sequence[tuple[MemoryScopeName, str]]) -> MemoryRows:
    """The rows of at most two (scope, owner) pairs, oldest first, in one query run in the
    caller's transaction (a session's load: :meth:`geode.memory.MemoryRead.read`)."""
    if not owners:
        return MemoryRows(rows=())
    if len(owners) > 2:
        raise ValueError("at most two owners in one read")
    (s1, o1), (s2, o2) = owners[0], owners[-1]
    return MemoryRows(rows=tuple(conn.execute(
        _FOR_OWNERS, {"s1": s1, "o1": o1, "s2": s2, "o2": o2}).all()))


MemoryScopeName = Literal["user", "channel"]


def new_entry_id() -> str:
    """A short id people can type (``/forget m3f9a1c2``)."""
    return "m" + secrets.token_hex(4)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, kw_only=True)
class MemoryEntry:
    """One remembered fact, as its row holds it (times in Unix milliseconds)."""

    id: str
    scope: MemoryScopeName
    owner: str
    text: str
    created_at: int
    updated_at: int
    created_by: str = ""
    updated_by: str = ""
    session_id: str = ""
    use_count: int = 0
    last_used_at: int | None = None

    @classmethod
    def from_row(cls, r: Any) -> MemoryEntry:
        """From a ``memory_entries`` row (any column order: read by name)."""
        return cls(id=r.id, scope=r.scope, owner=r.owner, text=r.text,
                   created_at=int(r.created_at), updated_at=int(r.updated_at),
                   created_by=r.created_by or "", updated_by=r.updated_by or "",
                   session_id=r.session_id or "", use_count=int(r.use_count or 0),
                   last_used_at=None if r.last_used_at is None else int(r.last_used_at))

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "scope": self.scope, "owner": self.owner, "text": self.text,
                "created_at": self.created_at, "updated_at": self.updated_at,
                "created_by": self.created_by, "updated_by": self.updated_by,
                "session_id": self.session_id, "use_count": self.use_count,
                "last_used_at": self.last_used_at}


@dataclass(frozen=True, kw_only=True)
class MemoryRows:
    """Rows of ``memory_entries`` as one read returned them (:meth:`MemoryStore.
    rows_for_owners`)."""

    rows: tuple[Any, ...]

    @property
    def content(self) -> tuple[tuple[Any, ...], ...]:
        """Every column of every row but the use counts, in order: equal content means
        equal entries (ids, texts, owners, times written) whatever their use since. Any
        write, from this process or another replica, changes it (a removal drops a row, an
        addition adds one, a replacement changes a text)."""
        return tuple(r[:-len(_USE_COLUMNS)] for r in self.rows)

    def entries(self) -> builtins.list[MemoryEntry]:
        return [MemoryEntry.from_row(r) for r in self.rows]


@dataclass(frozen=True, kw_only=True)
class MemoryAudit:
    """Who caused a write, and the session whose timeline records it (none: no row)."""

    by: str
    session_id: str = ""
    turn_id: str = ""
    #: where the write came from: ``tool``, ``command`` (/forget), ``cli``
    via: str = "tool"


class MemoryStore:
    """The ``memory_entries`` table, built from the database like every record store."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    # -- reads ----------------------------------------------------------------------------

    async def for_owners(self, owners: Sequence[tuple[MemoryScopeName, str]]
                         ) -> builtins.list[MemoryEntry]:
        """The entries of each (scope, owner) (at most two: a turn's user and channel),
        oldest first."""
        if len(owners) > 2:
            return [e for pair in owners for e in await self.for_owners([pair])]
        return (await self.rows_for_owners(owners)).entries()

    async def rows_for_owners(self, owners: Sequence[tuple[MemoryScopeName, str]]
                              ) -> MemoryRows:
        """The rows of at most two (scope, owner) pairs, oldest first, in one query (a
        turn's user and channel memory), not yet made entries: a caller that has the same
        content already (:attr:`MemoryRows.content`) need not."""
        if not owners:
            return MemoryRows(rows=())
        if len(owners) > 2:
            raise ValueError("at most two owners in one read")
        return await self._store.run_read(lambda conn: read_rows(conn, owners))

    async def get(self, entry_id: str) -> MemoryEntry | None:
        query = select(_M).where(_M.c.id == entry_id)
        row = await self._store.run_read(lambda conn: conn.execute(query).first())
        return None if row is None else MemoryEntry.from_row(row)

    async def list(self, *, scope: MemoryScopeName | None = None, owner: str | None = None
                   ) -> builtins.list[MemoryEntry]:
        """Every entry (or those of ``scope`` / ``owner``), oldest first."""
        query = select(_M).order_by(_M.c.created_at, _M.c.id)
        if scope is not None:
            query = query.where(_M.c.scope == scope)
        if owner is not None:
            query = query.where(_M.c.owner == owner)
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return [MemoryEntry.from_row(r) for r in rows]

    async def count(self, scope: MemoryScopeName, owner: str) -> int:
        query = select(func.count()).select_from(_M).where(_M.c.scope == scope,
                                                           _M.c.owner == owner)
        return int(await self._store.run_read(lambda conn: conn.execute(query).scalar_one()))

    # -- writes (each with its timeline row, in one transaction) --------------------------

    async def add(self, *, scope: MemoryScopeName, owner: str, text: str,
                  audit: MemoryAudit) -> MemoryEntry:
        now = _now_ms()
        text = redact_text(text)  # at rest: no credential (an entry is shown and reused)
        entry = MemoryEntry(id=new_entry_id(), scope=scope, owner=owner, text=text,
                            created_at=now, updated_at=now, created_by=audit.by,
                            updated_by=audit.by, session_id=audit.session_id)

        def write(conn: Connection) -> None:
            values = entry.as_dict()
            conn.execute(_M.insert().values(**values))
            self._record(conn, "memory.added", entry, audit)

        await self._store.run_write(write)
        return entry

    async def replace(self, *, entry_id: str, scope: MemoryScopeName, owner: str, text: str,
                      audit: MemoryAudit) -> MemoryEntry | None:
        """Replace the text of ``entry_id`` if it is ``owner``'s entry of ``scope`` (None:
        there is no such entry of theirs; nothing changed)."""
        now = _now_ms()
        text = redact_text(text)  # at rest: no credential

        def write(conn: Connection) -> MemoryEntry | None:
            result = conn.execute(
                update(_M).where(_M.c.id == entry_id, _M.c.scope == scope, _M.c.owner == owner)
                .values(text=text, updated_at=now, updated_by=audit.by))
            if not result.rowcount:
                return None
            row = conn.execute(select(_M).where(_M.c.id == entry_id)).one()
            entry = MemoryEntry.from_row(row)
            self._record(conn, "memory.replaced", entry, audit)
            return entry

        return await self._store.run_write(write)

    async def remove(self, *, entry_ids: Sequence[str], audit: MemoryAudit,
                     scope: MemoryScopeName | None = None, owner: str | None = None
                     ) -> builtins.list[MemoryEntry]:
        """Delete the entries named (only ``owner``'s of ``scope`` when given); returns what
        was deleted."""
        if not entry_ids:
            return []

        def write(conn: Connection) -> builtins.list[MemoryEntry]:
            query = select(_M).where(_M.c.id.in_(list(entry_ids)))
            if scope is not None:
                query = query.where(_M.c.scope == scope)
            if owner is not None:
                query = query.where(_M.c.owner == owner)
            found = [MemoryEntry.from_row(r) for r in conn.execute(query).all()]
            if found:
                conn.execute(delete(_M).where(_M.c.id.in_([e.id for e in found])))
                for entry in found:
                    self._record(conn, "memory.removed", entry, audit)
            return found

        return await self._store.run_write(write)

    async def touch(self, entry_ids: Sequence[str]) -> None:
        """Count one more use of each entry (its text went into a prompt), with the store's
        next write on SQLite (its own transaction on PostgreSQL). A session's turn does not
        come here: its count rides in its checkpoint save (:func:`count_use`)."""
        if not entry_ids:
            return

        def write(conn: Connection) -> None:
            count_use(conn, entry_ids)

        def failed(exc: Exception) -> None:  # a count lost costs nothing but its order
            log.warning("memory.touch_failed", entries=len(entry_ids), error=type(exc).__name__)

        await self._store.run_write_later(write, on_error=failed)

    def _record(self, conn: Connection, kind: str, entry: MemoryEntry,
                audit: MemoryAudit) -> None:
        if not audit.session_id:
            return
        insert_rows(conn, [timeline_row(
            session_id=audit.session_id, turn_id=audit.turn_id, kind=kind,
            payload={"id": entry.id, "scope": entry.scope, "owner": entry.owner,
                     "by": audit.by, "via": audit.via, "text": entry.text},
            secrets=self._store.secrets)])
