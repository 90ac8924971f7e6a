"""The web chat's records: its threads, the messages shown in them (the people's and the
bot's), the change log the browser follows, and the files that went in and out.

The web chat (``bots.webchat``) is a platform whose "server" is this store: a send, an edit,
a reaction or a deletion is one transaction that changes the message and appends a row to
``webchat_changes``. A browser renders the thread from the messages and follows the change
log by id (server-sent events with ``Last-Event-ID``), so what the bot sent survives a
restart, is shown once, and any replica on a shared store serves it.

A person's message is written with ``submitted = false`` before it is handed to the layer's
intake, and marked after: a crash between the two leaves it to be submitted again at the
next start (the intake's dedupe key refuses a second record), never lost, never doubled.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import (
    BigInteger,
    Boolean,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    insert,
    select,
    update,
)
from sqlalchemy.orm import Mapped, mapped_column

from bots.store._tables import Base
from geode.store.models import utcnow

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = ["WebChatFile", "WebChatMessage", "WebChatRecords", "WebChatThread"]

_BigId = BigInteger().with_variant(Integer(), "sqlite")


class WebChatThreadModel(Base):
    """A web-chat thread: opened by one signed-in person on one binding's channel."""

    __tablename__ = "webchat_threads"

    channel: Mapped[str] = mapped_column(String(100), primary_key=True)
    thread_root: Mapped[str] = mapped_column(String(100), primary_key=True)
    #: the web-chat user id of the person who opened it (``webchat:<owner>`` signed in)
    owner: Mapped[str] = mapped_column(String(100))
    title: Mapped[str] = mapped_column(String(200), default="")
    created_ms: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index(None, "owner", "created_ms"),)


class WebChatMessageModel(Base):
    """One message of a thread: a person's (``user``) or the bot's (``bot``). Its id is the
    platform message id the layer records and edits."""

    __tablename__ = "webchat_messages"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    channel: Mapped[str] = mapped_column(String(100))
    thread_root: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(16))  # user | bot
    sender: Mapped[str] = mapped_column(String(100), default="")
    sender_name: Mapped[str] = mapped_column(String(200), default="")
    text: Mapped[str] = mapped_column(Text, default="")
    #: the approval request this message asks ("" none); its Approve / Deny buttons are
    #: shown while ``buttons`` (an edit, the decision, takes them away)
    short_id: Mapped[str] = mapped_column(String(32), default="")
    buttons: Mapped[bool] = mapped_column(Boolean, default=False)
    reaction: Mapped[str] = mapped_column(String(32), default="")
    #: a file of ``webchat_files`` this message carries (None: text only)
    file_id: Mapped[int | None] = mapped_column(BigInteger)
    #: only this web-chat user sees it (an answer to their click); "" everyone
    visible_to: Mapped[str] = mapped_column(String(100), default="")
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)
    #: a person's message handed to the layer's intake (False: to submit again at start)
    submitted: Mapped[bool] = mapped_column(Boolean, default=True)
    created_ms: Mapped[int] = mapped_column(BigInteger)
    updated_ms: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (Index(None, "channel", "thread_root", "id"),
                      Index(None, "submitted"))


class WebChatChangeModel(Base):
    """Append-only: a message of a thread was sent, edited, reacted to or deleted. The
    browser follows these by id (the SSE event id)."""

    __tablename__ = "webchat_changes"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    channel: Mapped[str] = mapped_column(String(100))
    thread_root: Mapped[str] = mapped_column(String(100))
    message_id: Mapped[int] = mapped_column(BigInteger)
    created_ms: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (Index(None, "channel", "thread_root", "id"),)


class WebChatFileModel(Base):
    """A file a person uploaded into a thread (``in``) or the bot sent (``out``)."""

    __tablename__ = "webchat_files"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    channel: Mapped[str] = mapped_column(String(100))
    thread_root: Mapped[str] = mapped_column(String(100))
    direction: Mapped[str] = mapped_column(String(8))  # in | out
    name: Mapped[str] = mapped_column(String(255))
    mime: Mapped[str] = mapped_column(String(100), default="application/octet-stream")
    size: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_ms: Mapped[int] = mapped_column(BigInteger)


_TH = cast(Table, WebChatThreadModel.__table__)
_M = cast(Table, WebChatMessageModel.__table__)
_C = cast(Table, WebChatChangeModel.__table__)
_F = cast(Table, WebChatFileModel.__table__)


def _new_id(result: Any) -> int:
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, kw_only=True)
class WebChatThread:
    channel: str
    thread_root: str
    owner: str
    title: str
    created_ms: int


@dataclass(frozen=True, kw_only=True)
class WebChatFile:
    id: int
    channel: str
    thread_root: str
    direction: str
    name: str
    mime: str
    size: int


@dataclass(frozen=True, kw_only=True)
class WebChatMessage:
    id: int
    channel: str
    thread_root: str
    kind: str
    sender: str
    sender_name: str
    text: str
    short_id: str
    buttons: bool
    reaction: str
    file: WebChatFile | None
    visible_to: str
    deleted: bool
    created_ms: int
    updated_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "sender": self.sender,
                "sender_name": self.sender_name, "text": "" if self.deleted else self.text,
                "approval": self.short_id if self.buttons and not self.deleted else "",
                "reaction": self.reaction,
                "deleted": self.deleted, "created_ms": self.created_ms,
                "updated_ms": self.updated_ms,
                "file": None if self.file is None or self.deleted else {
                    "id": self.file.id, "name": self.file.name, "size": self.file.size}}


def _thread(r: Any) -> WebChatThread:
    return WebChatThread(channel=r.channel, thread_root=r.thread_root, owner=r.owner,
                         title=r.title, created_ms=r.created_ms)


def _file(r: Any) -> WebChatFile:
    return WebChatFile(id=r.id, channel=r.channel, thread_root=r.thread_root,
                       direction=r.direction, name=r.name, mime=r.mime, size=r.size)


_FILE_COLS = (_F.c.id, _F.c.channel, _F.c.thread_root, _F.c.direction, _F.c.name, _F.c.mime,
              _F.c.size)


def _messages(conn: Connection, rows: Sequence[Any]) -> list[WebChatMessage]:
    ids = {r.file_id for r in rows if r.file_id is not None}
    files = ({r.id: _file(r) for r in conn.execute(select(*_FILE_COLS).where(_F.c.id.in_(ids)))}
             if ids else {})
    return [WebChatMessage(
        id=r.id, channel=r.channel, thread_root=r.thread_root, kind=r.kind, sender=r.sender,
        sender_name=r.sender_name, text=r.text, short_id=r.short_id, buttons=r.buttons,
        reaction=r.reaction,
        file=files.get(r.file_id) if r.file_id is not None else None,
        visible_to=r.visible_to, deleted=r.deleted, created_ms=r.created_ms,
        updated_ms=r.updated_ms) for r in rows]


def _changed(conn: Connection, channel: str, root: str, message_id: int, now: int) -> None:
    conn.execute(insert(_C).values(channel=channel, thread_root=root, message_id=message_id,
                                   created_ms=now))


class WebChatRecords:
    """The web chat's named operations on the store."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    # -- a person's side ---------------------------------------------------------------------

    async def post(self, *, channel: str, thread_root: str | None, sender: str,
                   sender_name: str, text: str, file: tuple[str, str, bytes] | None = None,
                   title: str = "") -> WebChatMessage:
        """A person's message (``thread_root`` None: it opens a new thread, rooted at it),
        written unsubmitted, with its file (name, MIME type, bytes) if any."""
        now = _now_ms()

        def write(conn: Connection) -> WebChatMessage:
            file_id = None
            if file is not None:
                file_id = _new_id(conn.execute(insert(_F).values(
                    channel=channel, thread_root=thread_root or "", direction="in",
                    name=file[0][:255], mime=file[1][:100], size=len(file[2]), data=file[2],
                    created_ms=now)))
            mid = _new_id(conn.execute(insert(_M).values(
                channel=channel, thread_root=thread_root or "", kind="user", sender=sender,
                sender_name=sender_name[:200], text=text, short_id="", buttons=False,
                reaction="",
                file_id=file_id, visible_to="", deleted=False, submitted=False,
                created_ms=now, updated_ms=now)))
            root = thread_root or str(mid)
            if thread_root is None:
                conn.execute(update(_M).where(_M.c.id == mid).values(thread_root=root))
                if file_id is not None:
                    conn.execute(update(_F).where(_F.c.id == file_id).values(thread_root=root))
                conn.execute(insert(_TH).values(channel=channel, thread_root=root, owner=sender,
                                                title=(title or text)[:200], created_ms=now))
            _changed(conn, channel, root, mid, now)
            rows = conn.execute(select(_M).where(_M.c.id == mid)).all()
            return _messages(conn, rows)[0]

        return await self._store.run_write(write)

    async def mark_submitted(self, message_id: int) -> None:
        await self._store.run_write(lambda conn: conn.execute(
            update(_M).where(_M.c.id == message_id).values(submitted=True)))

    async def unsubmitted(self, *, limit: int = 500) -> list[WebChatMessage]:
        """People's messages not yet handed to the intake (a crash in between), oldest
        first."""
        def read(conn: Connection) -> list[WebChatMessage]:
            rows = conn.execute(select(_M).where(_M.c.submitted.is_(False))
                                .order_by(_M.c.id).limit(limit)).all()
            return _messages(conn, rows)

        return await self._store.run_read(read)

    # -- the bot's side (the connector's send / edit / react / delete / upload) -----------------

    async def send(self, *, channel: str, thread_root: str, text: str, short_id: str = "",
                   visible_to: str = "", file: tuple[str, str, bytes] | None = None) -> int:
        """The bot's message; its id."""
        now = _now_ms()

        def write(conn: Connection) -> int:
            file_id = None
            if file is not None:
                file_id = _new_id(conn.execute(insert(_F).values(
                    channel=channel, thread_root=thread_root, direction="out",
                    name=file[0][:255], mime=file[1][:100], size=len(file[2]), data=file[2],
                    created_ms=now)))
            mid = _new_id(conn.execute(insert(_M).values(
                channel=channel, thread_root=thread_root, kind="bot", sender="", sender_name="",
                text=text, short_id=short_id, buttons=bool(short_id), reaction="",
                file_id=file_id,
                visible_to=visible_to, deleted=False, submitted=True, created_ms=now,
                updated_ms=now)))
            _changed(conn, channel, thread_root, mid, now)
            return mid

        return await self._store.run_write(write)

    async def change(self, message_id: int, *, text: str | None = None,
                     reaction: str | None = None, deleted: bool | None = None,
                     clear_buttons: bool = False) -> str:
        """Change one of the bot's messages: ``done``, ``same`` (nothing to change), or
        ``missing`` (no such message, or it was deleted)."""
        now = _now_ms()

        def write(conn: Connection) -> str:
            row = conn.execute(select(_M).where(_M.c.id == message_id)).first()
            if row is None or row.deleted:
                return "missing"
            values: dict[str, Any] = {}
            if text is not None and text != row.text:
                values["text"] = text
            if clear_buttons and row.buttons:
                values["buttons"] = False
            if reaction is not None and reaction != row.reaction:
                values["reaction"] = reaction
            if deleted:
                values["deleted"] = True
            if not values:
                return "same"
            conn.execute(update(_M).where(_M.c.id == message_id)
                         .values(updated_ms=now, **values))
            _changed(conn, row.channel, row.thread_root, message_id, now)
            return "done"

        return await self._store.run_write(write)

    # -- reading -----------------------------------------------------------------------------------

    async def thread(self, channel: str, thread_root: str) -> WebChatThread | None:
        q = select(_TH).where(_TH.c.channel == channel, _TH.c.thread_root == thread_root)
        row = await self._store.run_read(lambda conn: conn.execute(q).first())
        return None if row is None else _thread(row)

    async def threads(self, *, owner: str | None = None, channels: Sequence[str] = (),
                      limit: int = 200) -> list[WebChatThread]:
        """Threads opened by ``owner``, or on ``channels``, newest first."""
        from sqlalchemy import or_

        conds = []
        if owner is not None:
            conds.append(_TH.c.owner == owner)
        if channels:
            conds.append(_TH.c.channel.in_(list(channels)))
        if not conds:
            return []
        q = select(_TH).where(or_(*conds)).order_by(_TH.c.created_ms.desc()).limit(limit)
        rows = await self._store.run_read(lambda conn: conn.execute(q).all())
        return [_thread(r) for r in rows]

    async def messages(self, channel: str, thread_root: str) -> tuple[list[WebChatMessage], int]:
        """The thread's messages, oldest first, and the id of its latest change (where a
        browser's event stream starts)."""
        def read(conn: Connection) -> tuple[list[WebChatMessage], int]:
            last = conn.execute(select(_C.c.id).where(
                _C.c.channel == channel, _C.c.thread_root == thread_root)
                .order_by(_C.c.id.desc()).limit(1)).scalar()
            rows = conn.execute(select(_M).where(
                _M.c.channel == channel, _M.c.thread_root == thread_root)
                .order_by(_M.c.id)).all()
            return _messages(conn, rows), int(last or 0)

        return await self._store.run_read(read)

    async def changes(self, channel: str, thread_root: str, *, after: int,
                      limit: int = 200) -> list[tuple[int, WebChatMessage]]:
        """The thread's changes after id ``after``: (change id, the message as it is now)."""
        def read(conn: Connection) -> list[tuple[int, WebChatMessage]]:
            found = conn.execute(select(_C.c.id, _C.c.message_id).where(
                _C.c.channel == channel, _C.c.thread_root == thread_root, _C.c.id > after)
                .order_by(_C.c.id).limit(limit)).all()
            if not found:
                return []
            rows = conn.execute(select(_M).where(
                _M.c.id.in_({r.message_id for r in found}))).all()
            by_id = {m.id: m for m in _messages(conn, rows)}
            return [(r.id, by_id[r.message_id]) for r in found if r.message_id in by_id]

        return await self._store.run_read(read)

    async def message(self, message_id: int) -> WebChatMessage | None:
        def read(conn: Connection) -> WebChatMessage | None:
            rows = conn.execute(select(_M).where(_M.c.id == message_id)).all()
            return _messages(conn, rows)[0] if rows else None

        return await self._store.run_read(read)

    async def find_sent(self, channel: str, thread_root: str, *, short_id: str = "",
                        file_name: str = "", size: int = -1, since_ms: int = 0) -> int | None:
        """The id of the bot's message carrying approval ``short_id`` or the file
        ``file_name`` of ``size`` bytes in the thread since ``since_ms`` (read back after a
        crash hid the id of a send)."""
        def read(conn: Connection) -> int | None:
            q = select(_M.c.id).where(
                _M.c.channel == channel, _M.c.thread_root == thread_root,
                _M.c.kind == "bot", _M.c.created_ms >= since_ms)
            if short_id:
                q = q.where(_M.c.short_id == short_id)
            else:
                q = q.join(_F, _F.c.id == _M.c.file_id).where(_F.c.name == file_name,
                                                              _F.c.size == size)
            return conn.execute(q.order_by(_M.c.id.desc()).limit(1)).scalar()

        return await self._store.run_read(read)

    async def file(self, file_id: int) -> tuple[WebChatFile, bytes] | None:
        def read(conn: Connection) -> tuple[WebChatFile, bytes] | None:
            row = conn.execute(select(_F).where(_F.c.id == file_id)).first()
            return None if row is None else (_file(row), bytes(row.data))

        return await self._store.run_read(read)
