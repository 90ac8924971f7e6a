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

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from bots._tables import messages_table, threads_table
from bots.events import InboundEvent
from geode.store.models import utcnow

if TYPE_CHECKING:
    from geode.store import Store

__all__ = ["MessageIndex", "ThreadSessions", "ThreadState"]

_T = threads_table
_M = messages_table


@dataclass(frozen=True, kw_only=True)
class ThreadState:
    thread_key: str
    session_id: str
    generation: int
    engaged: bool


def _state(row: Any) -> ThreadState:
    return ThreadState(thread_key=row.thread_key, session_id=row.session_id,
                       generation=row.generation, engaged=bool(row.engaged))


class ThreadSessions:
    """The ``channel_threads`` table: engaged threads and their current session."""

    def __init__(self, *, store: Store) -> None:
        self._store = store

    async def get(self, thread_key: str) -> ThreadState | None:
        async with self._store.read() as conn:
            row = (await conn.execute(select(_T).where(_T.c.thread_key == thread_key))).first()
        return _state(row) if row is not None else None

    async def engage(self, event: InboundEvent) -> ThreadState:
        """The thread's state, creating it (session id = thread key) on first contact."""
        current = await self.get(event.thread_key)
        if current is not None:
            return current
        try:
            async with self._store.write() as conn:
                await conn.execute(
                    insert(_T).values(
                        thread_key=event.thread_key, platform=event.platform,
                        workspace=event.workspace, channel=event.channel,
                        thread_root=event.thread_root, session_id=event.thread_key,
                        generation=0, engaged=True,
                    )
                )
        except IntegrityError:
            pass  # engaged concurrently: the existing row is the thread's
        state = await self.get(event.thread_key)
        assert state is not None
        return state

    async def start_new(
        self, event: InboundEvent, *, model: str = ""
    ) -> tuple[str | None, str]:
        """``/new``: bind the thread to a fresh session whose parent is the current one.

        Returns (previous session id or None, new session id).
        """
        state = await self.engage(event)
        gen = state.generation + 1
        new_id = f"{event.thread_key}#{gen}"
        sessions = self._store.sessions
        parent = state.session_id if await sessions.exists(state.session_id) else None
        await sessions.ensure(new_id, mode="DAEMON", model=model, parent_session_id=parent,
                              title=f"thread {event.thread_key}")
        async with self._store.write() as conn:
            await conn.execute(
                update(_T).where(_T.c.thread_key == event.thread_key,
                                 _T.c.generation == state.generation)
                .values(session_id=new_id, generation=gen, updated_at=utcnow())
            )
        return parent, new_id


class MessageIndex:
    """Which thread a message id belongs to (``channel_messages``)."""

    def __init__(self, *, store: Store) -> None:
        self._store = store

    async def thread_of(
        self, platform: str, workspace: str, channel: str, message_id: str
    ) -> str | None:
        async with self._store.read() as conn:
            row = (
                await conn.execute(
                    select(_M.c.thread_root).where(
                        _M.c.platform == platform, _M.c.workspace == workspace,
                        _M.c.channel == channel, _M.c.message_id == message_id,
                    )
                )
            ).first()
        return None if row is None else str(row.thread_root)

    async def remember(
        self, *, platform: str, workspace: str, channel: str, message_ids: list[str],
        thread_root: str, from_bot: bool,
    ) -> None:
        for mid in message_ids:
            try:
                async with self._store.write() as conn:
                    await conn.execute(
                        insert(_M).values(
                            platform=platform, workspace=workspace, channel=channel,
                            message_id=mid, thread_root=thread_root, from_bot=from_bot,
                        )
                    )
            except IntegrityError:
                pass  # known already (a recovered send)
