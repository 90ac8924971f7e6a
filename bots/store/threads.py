"""Thread -> session: a fixed session id per thread, shared by everybody in it.

The first session of a thread has the id ``platform:workspace:channel:thread_root``, so a
restart (or another replica) finds the same checkpoint chain without any lookup. ``/new``
starts ``<thread key>#<n>`` whose ``parent_session_id`` is the previous session: the
lineage is kept and the old transcript stays readable (``geode sessions show``). Nothing
resets a thread automatically.

:class:`MessageIndex` remembers which thread every seen or sent message belongs to, so a
reply to any message of a thread (the bot's answers included) lands in that thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, select, update

from bots.events import InboundEvent
from bots.store._sql import insert_ignore
from bots.store._tables import messages_table, outbox_table, threads_table
from geode.store.models import utcnow
from geode.store.sessions import SessionStore

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from geode.store.database import Database

__all__ = ["MessageIndex", "ThreadSessions", "ThreadState"]

_T = threads_table
_M = messages_table
_THREAD = select(_T).where(_T.c.thread_key == bindparam("b_key"))


@dataclass(frozen=True, kw_only=True)
class ThreadState:
    thread_key: str
    session_id: str
    generation: int
    engaged: bool
    #: the model ``/model`` chose for the thread's next turns ("" = the binding's)
    model: str = ""


def _state(row: Any) -> ThreadState:
    return ThreadState(thread_key=row.thread_key, session_id=row.session_id,
                       generation=row.generation, engaged=bool(row.engaged),
                       model=row.model or "")


class ThreadSessions:
    """The ``channel_threads`` table: engaged threads and their current session."""

    def __init__(self, *, store: Database) -> None:
        self._store = store
        self._sessions = SessionStore(store=store)

    async def get(self, thread_key: str) -> ThreadState | None:
        row = await self._store.run_read(
            lambda conn: conn.execute(_THREAD, {"b_key": thread_key}).first())
        return _state(row) if row is not None else None

    async def engage(self, event: InboundEvent) -> ThreadState:
        """The thread's state, creating it (session id = thread key) on first contact."""
        return await self._store.run_write(lambda conn: self.engage_in(conn, event))

    def engage_in(self, conn: Connection, event: InboundEvent) -> ThreadState:
        """:meth:`engage` inside the caller's (sync) write transaction."""
        # Insert-or-ignore, not insert + IntegrityError: a failed statement would abort the
        # caller's whole transaction on PostgreSQL.
        row = conn.execute(
            insert_ignore(self._store, _T, ["thread_key"], returning=_T.c.keys()), {
                "thread_key": event.thread_key, "platform": event.platform,
                "workspace": event.workspace, "channel": event.channel,
                "thread_root": event.thread_root, "session_id": event.thread_key,
                "generation": 0, "engaged": True, "model": "", "created_at": utcnow(),
                "updated_at": utcnow(),
            }
        ).first()
        if row is None:  # engaged before: the existing row
            row = conn.execute(_THREAD, {"b_key": event.thread_key}).first()
        assert row is not None
        return _state(row)

    async def start_new(
        self, event: InboundEvent, *, model: str = ""
    ) -> tuple[str | None, str]:
        """``/new``: bind the thread to a fresh session whose parent is the current one.

        Returns (previous session id or None, new session id).
        """
        state = await self.engage(event)
        gen = state.generation + 1
        new_id = f"{event.thread_key}#{gen}"
        sessions = self._sessions
        parent = state.session_id if await sessions.exists(state.session_id) else None
        await sessions.ensure(new_id, mode="DAEMON", model=model, parent_session_id=parent,
                              title=f"thread {event.thread_key}")
        stmt = (update(_T).where(_T.c.thread_key == event.thread_key,
                                 _T.c.generation == state.generation)
                .values(session_id=new_id, generation=gen, updated_at=utcnow()))
        await self._store.run_write(lambda conn: conn.execute(stmt))
        return parent, new_id

    async def set_model(self, event: InboundEvent, model: str) -> None:
        """``/model ID``: the thread's next turns run on ``model`` ("" = the binding's). In
        the store, so a restart or another replica's turn of the thread uses it too."""

        def write(conn: Connection) -> None:
            self.engage_in(conn, event)
            conn.execute(update(_T).where(_T.c.thread_key == event.thread_key)
                         .values(model=model, updated_at=utcnow()))

        await self._store.run_write(write)

    async def latest_in_channel(self, platform: str, workspace: str, channel: str) -> str | None:
        """The root of the channel's thread with the newest running turn, else of its
        newest thread (a slash command given without a thread)."""
        o = outbox_table
        running = select(o.c.thread_root).where(
            o.c.platform == platform, o.c.workspace == workspace, o.c.channel == channel,
            o.c.kind == "turn", o.c.status == "pending",
        ).order_by(o.c.id.desc()).limit(1)
        newest = select(_T.c.thread_root).where(
            _T.c.platform == platform, _T.c.workspace == workspace, _T.c.channel == channel,
        ).order_by(_T.c.created_at.desc()).limit(1)

        def read(conn: Connection) -> Any:
            return conn.execute(running).first() or conn.execute(newest).first()

        row = await self._store.run_read(read)
        return None if row is None else str(row.thread_root)

    async def engaged_roots(
        self, platform: str, workspace: str, channel: str, *, limit: int
    ) -> list[str]:
        """Roots of the channel's engaged threads, newest first."""
        query = select(_T.c.thread_root).where(
            _T.c.platform == platform, _T.c.workspace == workspace, _T.c.channel == channel,
            _T.c.engaged.is_(True),
        ).order_by(_T.c.created_at.desc()).limit(limit)
        rows = await self._store.run_read(lambda conn: conn.execute(query).all())
        return [str(r.thread_root) for r in rows]


class MessageIndex:
    """Which thread a message id belongs to (``channel_messages``)."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    async def thread_of(
        self, platform: str, workspace: str, channel: str, message_id: str
    ) -> str | None:
        query = select(_M.c.thread_root).where(
            _M.c.platform == platform, _M.c.workspace == workspace,
            _M.c.channel == channel, _M.c.message_id == message_id,
        )
        await self._store.flush_later()  # progress messages are entered without waiting
        row = await self._store.run_read(lambda conn: conn.execute(query).first())
        return None if row is None else str(row.thread_root)

    async def remember(
        self, *, platform: str, workspace: str, channel: str, message_ids: list[str],
        thread_root: str, from_bot: bool,
    ) -> None:
        if not message_ids:
            return
        await self._store.run_write(lambda conn: self.remember_in(
            conn, platform=platform, workspace=workspace, channel=channel,
            message_ids=message_ids, thread_root=thread_root, from_bot=from_bot))

    def remember_in(
        self, conn: Connection, *, platform: str, workspace: str, channel: str,
        message_ids: list[str], thread_root: str, from_bot: bool,
    ) -> None:
        """:meth:`remember` inside the caller's (sync) write transaction."""
        stmt = insert_ignore(self._store, _M, ["platform", "workspace", "channel",
                                                "message_id"])
        for mid in message_ids:
            # A known id (a recovered send) is skipped, not an error.
            conn.execute(stmt, {
                "platform": platform, "workspace": workspace, "channel": channel, "message_id": mid,
                "thread_root": thread_root, "from_bot": from_bot, "created_at": utcnow(),
            })
