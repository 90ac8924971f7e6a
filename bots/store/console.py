"""The operator console's records: one-time sign-in links (``console_links``) and browser
sessions (``console_sessions``), plus the read-only views of the channel tables its pages
show (threads per binding).

Neither table holds a secret: a link or session token is stored as its SHA-256, so a copy of
the database signs nobody in. Redeeming a link is one conditional ``UPDATE ... WHERE
used_at IS NULL AND expires_at > now`` in the same transaction that creates the session: a
replayed link (a second click, a chat client's link preview racing the person) signs in
once, whichever request is first.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, cast

from sqlalchemy import (
    BigInteger,
    Index,
    String,
    Table,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Mapped, mapped_column

from bots.store._tables import Base, outbox_table, threads_table
from geode.errors import GeodeError
from geode.store.models import sessions_table, timeline_table, utcnow

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = [
    "LINK_TTL_S",
    "MAX_LINKS_PER_WINDOW",
    "SESSION_TTL_S",
    "ConsoleLinkLimitError",
    "ConsoleLinks",
    "ConsoleSession",
    "ConsoleSessions",
    "ConsoleThreads",
    "LinkRefusal",
    "ThreadSummary",
    "token_hash",
]

#: a sign-in link is good for this long, once
LINK_TTL_S = 600
#: links one identity may be given per LINK_TTL_S (a flood of /console messages or CLI
#: calls must not become a flood of live links)
MAX_LINKS_PER_WINDOW = 5
#: a console session ends this long after its sign-in (sign in again with a new link)
SESSION_TTL_S = 12 * 3600
#: ended sessions (and spent links) stay listed this long (``geode console sessions --all``)
KEEP_ENDED_S = 30 * 24 * 3600

LinkRefusal = Literal["unknown", "used", "expired"]


class ConsoleLinkLimitError(GeodeError):
    """Too many sign-in links for one identity within :data:`LINK_TTL_S`."""


class ConsoleLinkModel(Base):
    """A one-time sign-in link for one chat identity (``platform`` + ``user_id``)."""

    __tablename__ = "console_links"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    platform: Mapped[str] = mapped_column(String(32))
    user_id: Mapped[str] = mapped_column(String(100))
    #: where it was issued: "cli" (``geode console link``) or "dm" (``/console``)
    via: Mapped[str] = mapped_column(String(16))
    issued_at: Mapped[int] = mapped_column(BigInteger)  # unix milliseconds
    expires_at: Mapped[int] = mapped_column(BigInteger)
    used_at: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index(None, "platform", "user_id", "issued_at"),)


class ConsoleSessionModel(Base):
    """A signed-in browser: the cookie holds the token, this row its hash."""

    __tablename__ = "console_sessions"

    #: the public id (``geode console sessions revoke ID``)
    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    platform: Mapped[str] = mapped_column(String(32))
    user_id: Mapped[str] = mapped_column(String(100))
    signed_in_at: Mapped[int] = mapped_column(BigInteger)  # unix milliseconds
    expires_at: Mapped[int] = mapped_column(BigInteger)
    revoked_at: Mapped[int | None] = mapped_column(BigInteger)
    #: the browser's address and User-Agent at sign-in (for people reading the list)
    remote: Mapped[str] = mapped_column(String(100), default="")
    user_agent: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index(None, "expires_at"),)


_L = cast(Table, ConsoleLinkModel.__table__)
_S = cast(Table, ConsoleSessionModel.__table__)
_T = threads_table
_SESS = sessions_table
_O = outbox_table
_TL = timeline_table
_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"


def _now_ms() -> int:
    return int(time.time() * 1000)


def token_hash(token: str) -> str:
    """What the store keeps of a link or session token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True, kw_only=True)
class ConsoleSession:
    id: str
    platform: str
    user_id: str
    signed_in_at: int
    expires_at: int
    revoked_at: int | None
    remote: str
    user_agent: str

    @property
    def identity(self) -> str:
        return f"{self.platform}:{self.user_id}"

    def active(self, now_ms: int) -> bool:
        return self.revoked_at is None and self.expires_at > now_ms


def _session(r: Any) -> ConsoleSession:
    return ConsoleSession(id=r.id, platform=r.platform, user_id=r.user_id,
                          signed_in_at=r.signed_in_at, expires_at=r.expires_at,
                          revoked_at=r.revoked_at, remote=r.remote, user_agent=r.user_agent)


class ConsoleLinks:
    """One-time sign-in links."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    async def issue(self, platform: str, user_id: str, *, via: str,
                    now_ms: int | None = None) -> str:
        """A new link token for the identity (the caller decided it may sign in).

        Raises:
            ConsoleLinkLimitError: :data:`MAX_LINKS_PER_WINDOW` were issued to it within
                the last :data:`LINK_TTL_S`.
        """
        now = _now_ms() if now_ms is None else now_ms
        token = secrets.token_urlsafe(32)

        def write(conn: Connection) -> None:
            recent = conn.execute(
                select(func.count()).select_from(_L).where(
                    _L.c.platform == platform, _L.c.user_id == user_id,
                    _L.c.issued_at > now - LINK_TTL_S * 1000)
            ).scalar_one()
            if recent >= MAX_LINKS_PER_WINDOW:
                raise ConsoleLinkLimitError(
                    f"{platform}:{user_id} was given {recent} sign-in links in the last "
                    f"{LINK_TTL_S // 60} minutes; use one of them or wait")
            conn.execute(insert(_L).values(
                token_hash=token_hash(token), platform=platform, user_id=user_id, via=via,
                issued_at=now, expires_at=now + LINK_TTL_S * 1000, used_at=None))

        await self._store.run_write(write)
        return token

    async def redeem(
        self, token: str, *, remote: str = "", user_agent: str = "",
        now_ms: int | None = None,
    ) -> tuple[ConsoleSession, str] | LinkRefusal:
        """Use the link once: a new session and its cookie token, or why not (``unknown``,
        ``used``, ``expired``). The link's use and the session are one transaction."""
        now = _now_ms() if now_ms is None else now_ms
        h = token_hash(token)

        def write(conn: Connection) -> tuple[ConsoleSession, str] | LinkRefusal:
            used = conn.execute(
                update(_L).where(_L.c.token_hash == h, _L.c.used_at.is_(None),
                                 _L.c.expires_at > now).values(used_at=now)
            ).rowcount
            row = conn.execute(select(_L).where(_L.c.token_hash == h)).first()
            if row is None:
                return "unknown"
            if not used:
                return "used" if row.used_at is not None else "expired"
            cookie = secrets.token_urlsafe(32)
            sid = "".join(secrets.choice(_ALPHABET) for _ in range(10))
            conn.execute(insert(_S).values(
                id=sid, token_hash=token_hash(cookie), platform=row.platform,
                user_id=row.user_id, signed_in_at=now, expires_at=now + SESSION_TTL_S * 1000,
                revoked_at=None, remote=remote[:100], user_agent=user_agent[:200]))
            session = ConsoleSession(id=sid, platform=row.platform, user_id=row.user_id,
                                     signed_in_at=now, expires_at=now + SESSION_TTL_S * 1000,
                                     revoked_at=None, remote=remote[:100],
                                     user_agent=user_agent[:200])
            return session, cookie

        return await self._store.run_write(write)


class ConsoleSessions:
    """Signed-in browsers: looked up by cookie, listed and revoked by the operator."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    async def by_token(self, token: str, *, now_ms: int | None = None) -> ConsoleSession | None:
        """The active session of a cookie token (None: unknown, revoked or expired)."""
        now = _now_ms() if now_ms is None else now_ms
        q = select(_S).where(_S.c.token_hash == token_hash(token))
        row = await self._store.run_read(lambda conn: conn.execute(q).first())
        if row is None:
            return None
        session = _session(row)
        return session if session.active(now) else None

    async def list(self, *, include_ended: bool = False,
                   now_ms: int | None = None) -> list[ConsoleSession]:
        """Sessions, newest first; only the active ones unless ``include_ended``."""
        now = _now_ms() if now_ms is None else now_ms
        q = select(_S).order_by(_S.c.signed_in_at.desc())
        if not include_ended:
            q = q.where(_S.c.revoked_at.is_(None), _S.c.expires_at > now)
        rows = await self._store.run_read(lambda conn: conn.execute(q).all())
        return [_session(r) for r in rows]

    async def prune(self, *, now_ms: int | None = None) -> int:
        """Forget sessions and links that ended more than :data:`KEEP_ENDED_S` ago (the
        console does it when it starts); returns how many rows went."""
        now = _now_ms() if now_ms is None else now_ms
        cutoff = now - KEEP_ENDED_S * 1000
        old_sessions = delete(_S).where(or_(_S.c.expires_at < cutoff, _S.c.revoked_at < cutoff))
        old_links = delete(_L).where(_L.c.expires_at < cutoff)

        def write(conn: Connection) -> int:
            return int(conn.execute(old_sessions).rowcount or 0) + int(
                conn.execute(old_links).rowcount or 0)

        return await self._store.run_write(write)

    async def revoke(self, session_id: str, *, now_ms: int | None = None) -> bool:
        """End a session at once (its cookie signs nobody in any more); False: no active
        session has that id."""
        now = _now_ms() if now_ms is None else now_ms
        stmt = (update(_S).where(_S.c.id == session_id, _S.c.revoked_at.is_(None))
                .values(revoked_at=now))
        return await self._store.run_write(lambda conn: bool(conn.execute(stmt).rowcount))


@dataclass(frozen=True, kw_only=True)
class ThreadSummary:
    thread_key: str
    platform: str
    workspace: str
    channel: str
    thread_root: str
    session_id: str
    title: str
    updated_at: datetime | None


class ConsoleThreads:
    """The engaged threads of a channel, for the console's pages (read only)."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    async def of_channel(
        self, platform: str, channel: str, *, team: str = "", search: str = "", limit: int = 100,
    ) -> list[ThreadSummary]:
        """The channel's threads, the most recently active first; ``search`` matches the
        session title, thread root or session id (case-insensitive substring)."""
        q = (select(_T, _SESS.c.title)
             .select_from(_T.outerjoin(_SESS, _SESS.c.id == _T.c.session_id))
             .where(_T.c.platform == platform, _T.c.channel == channel))
        if team:
            q = q.where(_T.c.workspace == team)
        if search:
            like = f"%{search.lower()}%"
            q = q.where(or_(func.lower(_SESS.c.title).like(like),
                            func.lower(_T.c.thread_root).like(like),
                            func.lower(_T.c.session_id).like(like)))
        q = q.order_by(_T.c.updated_at.desc()).limit(limit)
        rows = await self._store.run_read(lambda conn: conn.execute(q).all())
        return [_thread(r) for r in rows]

    async def changes(self, session_id: str, *, after_id: int,
                      limit: int = 200) -> tuple[int, list[dict[str, Any]]]:
        """What a live page needs to follow a session: its message count now, and its
        timeline rows after ``after_id`` (oldest first), in one read."""
        rows_q = (select(_TL).where(_TL.c.session_id == session_id, _TL.c.id > after_id)
                  .order_by(_TL.c.id).limit(limit))
        count_q = select(_SESS.c.message_count).where(_SESS.c.id == session_id)

        def read(conn: Connection) -> tuple[int, list[dict[str, Any]]]:
            count = conn.execute(count_q).scalar()
            rows = [{"id": r.id, "turn_id": r.turn_id, "kind": r.kind,
                     "payload": dict(r.payload or {}), "created_at": r.created_at}
                    for r in conn.execute(rows_q)]
            return int(count or 0), rows

        # no flush_later(): a live page must not force the daemon's deferred rows out early
        # (they are committed with its next write, and shown then)
        return await self._store.run_read(read)

    async def files_out(self, session_id: str) -> list[dict[str, Any]]:
        """The files a session's turns sent into its thread (``send_file``), oldest first:
        name, size, and whether the upload went out."""
        q = (select(_O.c.turn_key, _O.c.status, _O.c.chunks, _O.c.error, _O.c.updated_at)
             .where(_O.c.session_key == session_id, _O.c.kind == "file").order_by(_O.c.id))
        rows = await self._store.run_read(lambda conn: conn.execute(q).all())
        out = []
        for r in rows:
            first = r.chunks[0] if r.chunks and isinstance(r.chunks[0], dict) else {}
            described = first.get("file") or {}
            out.append({"name": described.get("name", ""), "size": described.get("size", 0),
                        "status": r.status, "error": r.error, "at": r.updated_at})
        return out

    async def failed_replies(self, *, since: datetime, limit: int = 50) -> list[dict[str, Any]]:
        """Replies that did not go out (``failed``) or may not have (``uncertain``) since
        ``since``, the newest first: the Overview's recent errors."""
        q = (select(_O.c.id, _O.c.platform, _O.c.workspace, _O.c.channel, _O.c.thread_root,
                    _O.c.kind, _O.c.status, _O.c.error, _O.c.updated_at)
             .where(_O.c.status.in_(("failed", "uncertain")), _O.c.updated_at >= since)
             .order_by(_O.c.updated_at.desc()).limit(limit))
        rows = await self._store.run_read(lambda conn: conn.execute(q).all())
        return [dict(r._mapping) for r in rows]

    async def get(self, thread_key: str) -> ThreadSummary | None:
        q = (select(_T, _SESS.c.title)
             .select_from(_T.outerjoin(_SESS, _SESS.c.id == _T.c.session_id))
             .where(_T.c.thread_key == thread_key))
        row = await self._store.run_read(lambda conn: conn.execute(q).first())
        return None if row is None else _thread(row)


def _thread(r: Any) -> ThreadSummary:
    return ThreadSummary(thread_key=r.thread_key, platform=r.platform, workspace=r.workspace,
                         channel=r.channel, thread_root=r.thread_root,
                         session_id=r.session_id, title=r.title or "",
                         updated_at=r.updated_at)
