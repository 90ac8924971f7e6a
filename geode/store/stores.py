"""The harness's record stores, bundled on one :class:`~geode.store.database.Database`.

:class:`Store` is the database plus the records every harness entry point uses
(``sessions``, ``checkpoints``, ``receipts``, ``timeline``, ``usage``, ``results``, and
``checkpointer(session_id)``). Each record store is built from the database alone, so other
packages build theirs the same way (``bots.store.ChannelStore(store=...)``); the database
imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from geode.store.checkpoint import CheckpointStore, SessionCheckpointer
from geode.store.claim import Claim
from geode.store.database import Database, open_engines
from geode.store.receipts import ReceiptStore
from geode.store.results import KeptResultStore
from geode.store.sessions import SessionStore
from geode.store.timeline import SessionTimeline
from geode.store.usage import UsageLedger

__all__ = ["Store", "open_store"]


class Store(Database):
    """The database and the harness's record stores on it.

    Build it with :func:`open_store`. A caller that needs only the transactions may take a
    :class:`Database` (a ``Store`` is one).
    """

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        url: URL,
        secrets: tuple[str, ...] = (),
        sync_engine: Engine | None = None,
    ) -> None:
        super().__init__(engine=engine, url=url, secrets=secrets, sync_engine=sync_engine)
        self.sessions = SessionStore(store=self)
        self.checkpoints = CheckpointStore(store=self)
        self.receipts = ReceiptStore(store=self)
        self.timeline = SessionTimeline(store=self)
        self.usage = UsageLedger(store=self)
        self.results = KeptResultStore(store=self)

    def checkpointer(
        self,
        session_id: str,
        *,
        fence: Claim | None = None,
        opening: Sequence[tuple[str, Mapping[str, Any], str]] = (),
        riders: Sequence[Callable[[Connection], None]] = (),
    ) -> SessionCheckpointer:
        """The checkpoint chain of one session (the loop's ``Checkpointer``); ``fence``,
        ``opening`` and ``riders`` as in :class:`SessionCheckpointer`."""
        return SessionCheckpointer(store=self, session_id=session_id, fence=fence,
                                   opening=opening, riders=riders)


async def open_store(url: str, *, migrate: bool = True, secrets: tuple[str, ...] = ()) -> Store:
    """Open the store at ``url``, applying every branch's migrations first unless
    ``migrate=False`` (as :func:`~geode.store.database.open_database`).

    Raises:
        StoreError: corrupt or foreign database file, unreachable server, or a schema that
            is not at this version's heads (when ``migrate=False``).
        ConfigError: the URL is not one we support.
    """
    engine, parsed, sync_engine = await open_engines(url, migrate=migrate)
    return Store(engine=engine, url=parsed, secrets=tuple(secrets), sync_engine=sync_engine)
