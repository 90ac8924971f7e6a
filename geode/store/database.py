"""The database: one async SQLAlchemy engine for SQLite (aiosqlite) or PostgreSQL (psycopg 3),
a sync engine beside it, and the transactions every record store runs in.

:class:`Database` knows no record store: each (sessions, checkpoints, timeline, receipts,
usage, kept results, and the channel layer's in ``bots.store``) is built from one, and
:class:`~geode.store.stores.Store` bundles the harness's. The dialect facts (URLs, pragmas,
pools) are in :mod:`geode.store._engines`, SQLite's writer in :mod:`geode.store._writer`, the
migration branches in :mod:`geode.store.schema`.

SQLite writers are serialised in two layers:

* inside one process, a writer slot per :class:`Database` admits one write
  transaction at a time. Waiting on it costs nothing and cannot time out, so 50 sessions
  saving at once queue up instead of racing for SQLite's single writer slot;
* across processes (``geode serve`` and a ``geode run`` on the same file), every write
  transaction starts with ``BEGIN IMMEDIATE``: the write lock is taken at BEGIN, where the
  5 s ``busy_timeout`` applies. A deferred transaction that reads and then tries to write
  can get SQLITE_BUSY at once, without waiting, which is the classic "database is locked".

Reads use deferred transactions and run concurrently with the writer (WAL mode).
PostgreSQL needs none of this: rows are locked with ``SELECT ... FOR UPDATE``.

Two ways in, same database, same statements:

* :meth:`Database.run_write` / :meth:`Database.run_read` run a *synchronous* function
  holding a whole transaction in one hop to a small worker-thread pool, on a sync engine
  (pysqlite / psycopg). The hot path (checkpoints, receipts, timeline, sessions) uses these:
  aiosqlite hops to its thread for every DBAPI call (~18 hops per checkpoint save), which
  made a save cost 4-5x what the SQL itself costs;
* :meth:`Database.write` / :meth:`Database.read` yield an ``AsyncConnection`` (aiosqlite /
  psycopg async) for code that awaits other things inside its transaction.

On SQLite the functions get the connection wrapped in
:class:`~geode.store._sqlite_cursor.FastConnection`, which runs the hot path's prebuilt
statements on the DBAPI cursor, compiled once (SQLAlchemy's own execution of a cached
statement cost several times SQLite's work).

Both take the same per-database SQLite writer slot, so they queue behind each other. On
SQLite, ``run_write`` jobs that queue up together are group-committed: one transaction, a
savepoint per job, one commit, and each caller told its own outcome after that commit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, Self, TypeVar, cast

import structlog
from sqlalchemy import func, select, text
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from geode.errors import StoreError
from geode.store._engines import (
    SYNC_WORKERS,
    build_engine,
    build_sync_engine,
    normalize_url,
    where,
)
from geode.store._sqlite_cursor import FastConnection
from geode.store._writer import Abandoned, GroupCommit, WriterSlot, settle
from geode.store.schema import check_and_migrate

__all__ = ["Database", "open_database", "open_engines"]

log = structlog.get_logger(__name__)

_T = TypeVar("_T")


class Database:
    """One database: its engines, transactions, SQLite writer and dialect facts.

    Every record store is built from one (``SessionStore(store=db)``); this class knows
    none of them (:class:`~geode.store.stores.Store` bundles the harness's). Build it with
    :func:`open_database`. Transactions: :meth:`run_write` / :meth:`run_read` (a sync
    function, one thread hop, ``sync_engine``) or :meth:`write` / :meth:`read` (an
    ``AsyncConnection``, ``engine``).
    """

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        url: URL,
        secrets: tuple[str, ...] = (),
        sync_engine: Engine | None = None,
    ) -> None:
        self.engine = engine
        self.url = url
        self.dialect: str = url.get_backend_name()
        self.where = where(url)
        self.secrets = secrets
        self._write_engine = engine.execution_options(geode_write=True)
        self.sync_engine = sync_engine if sync_engine is not None else build_sync_engine(url)
        # SQLite reads begin explicitly (isolation_level=None); SQLite writes go through
        # GroupCommit, which begins IMMEDIATE itself.
        self._sqlite_read_begin = "BEGIN" if self.dialect == "sqlite" else None
        # Created on first use and again after aclose(), so a closed store can be reused
        # like a disposed engine can.
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        # SQLite has one writer slot per file: queue writers of this process here (see
        # the module docstring). PostgreSQL locks rows, so no process-wide lock.
        self._write_lock: WriterSlot | None = WriterSlot() if self.dialect == "sqlite" else None
        self._group = (GroupCommit(self.sync_engine, self._write_lock)
                       if self._write_lock is not None else None)
        self.session_factory: async_sessionmaker[AsyncSession] = async_sessionmaker(
            self._write_engine, expire_on_commit=False
        )

    async def run_write(self, fn: Callable[[Connection], _T]) -> _T:
        """Run ``fn(conn)`` as one write transaction in a worker thread; return its result.

        ``fn`` is synchronous and must not touch the event loop. The transaction commits
        when ``fn`` returns and rolls back if it raises (the exception propagates here).
        On SQLite it starts with ``BEGIN IMMEDIATE`` and holds this store's writer lock,
        the same lock :meth:`write` takes; writers that queue up at once share one
        transaction, each ``fn`` in its own savepoint (see :class:`GroupCommit`).

        If the caller is cancelled, the transaction is rolled back unless it already
        reached COMMIT, and the writer lock is held until the thread is out of it.
        """
        if self._group is not None:
            return cast(_T, await self._group.submit(fn))
        return await self._hop(fn, write=True)

    async def run_write_later(
        self, fn: Callable[[Connection], Any], *, on_error: Callable[[Exception], None]
    ) -> None:
        """Run ``fn(conn)`` in this store's NEXT write transaction, without waiting for it.

        For rows nothing waits on and whose loss in a crash costs nothing that a crash just
        before them would not (observation rows): on SQLite the job rides in the group
        commit of the next :meth:`run_write` (its own savepoint: a failure rolls back this
        job alone and is passed to ``on_error``), or in a transaction of its own after at
        most ``GroupCommit.LATER_S`` if no other write comes; :meth:`flush_later` (the
        readers of such rows call it, and :meth:`aclose`) writes the waiting ones now. On
        PostgreSQL (no group commit) it is written now, as :meth:`run_write`.
        """
        if self._group is not None:
            self._group.later(fn, on_error)
            return
        try:
            await self._hop(fn, write=True)
        except Exception as exc:
            on_error(exc)

    async def flush_later(self) -> None:
        """Commit the jobs :meth:`run_write_later` left waiting (a reader of their rows calls
        this first, so this process always reads what it wrote)."""
        if self._group is not None:
            await self._group.flush_later()

    async def run_read(self, fn: Callable[[Connection], _T]) -> _T:
        """Run ``fn(conn)`` in one read transaction in a worker thread (rolled back after)."""
        return await self._hop(fn, write=False)

    async def _hop(self, fn: Callable[[Connection], _T], *, write: bool) -> _T:
        abandoned = threading.Event()
        engine = self.sync_engine
        # Writes reach here only on PostgreSQL (SQLite writes are group-committed).
        begin = None if write else self._sqlite_read_begin
        sqlite = self.dialect == "sqlite"

        def job() -> _T:
            if abandoned.is_set():
                raise Abandoned  # cancelled while queued: do not start it at all
            with engine.connect() as conn:  # closing rolls back whatever is not committed
                if begin is not None:
                    # pysqlite runs with isolation_level=None (see the connect hook), so
                    # SQLite's transaction starts here.
                    conn.exec_driver_sql(begin)
                result = fn(cast(Connection, FastConnection(conn)) if sqlite else conn)
                if write:
                    if abandoned.is_set():
                        raise Abandoned  # nobody waits for it: roll back, do not commit
                    conn.commit()
                return result

        ctx = contextvars.copy_context()  # structlog context vars, like asyncio.to_thread
        fut = asyncio.get_running_loop().run_in_executor(self._workers(), ctx.run, job)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            abandoned.set()
            await settle(fut)
            raise

    def _workers(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=SYNC_WORKERS, thread_name_prefix="geode-store"
            )
        return self._executor

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """One write transaction, committed on exit (``BEGIN IMMEDIATE`` on SQLite)."""
        lock = self._write_lock or contextlib.nullcontext()
        async with lock, self._write_engine.begin() as conn:
            yield conn

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """One read-only transaction (rolled back on exit)."""
        async with self.engine.connect() as conn:
            yield conn

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    @staticmethod
    def notify_stmt(channel: str, payload: str) -> Any:
        """PostgreSQL: the statement that notifies ``channel`` when its transaction commits
        (``pg_notify``; nothing is sent on rollback). Listeners: :meth:`notifications`."""
        return select(func.pg_notify(channel, payload))

    async def notifications(self, channel: str) -> AsyncIterator[str]:
        """PostgreSQL: the payloads notified on ``channel`` (``LISTEN`` on a connection of its
        own, outside the pools), until the caller stops iterating or the connection fails.

        Raises:
            StoreError: not a PostgreSQL store.
        """
        if not self.is_postgres:
            raise StoreError("notifications need a PostgreSQL store")
        import psycopg
        from psycopg import sql

        conninfo = self.url.set(drivername="postgresql").render_as_string(hide_password=False)
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True,
                                                         connect_timeout=10) as conn:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            async for note in conn.notifies():
                yield note.payload

    async def ping(self) -> bool:
        """Readiness check: can a trivial query run now, on both engines?"""
        try:
            async with self.read() as conn:
                await conn.execute(text("SELECT 1"))
            await self.run_read(lambda conn: conn.execute(text("SELECT 1")).scalar())
        except (SQLAlchemyError, OSError) as exc:
            # debug: the caller logs the transition (a probe a second would flood the log)
            log.debug("store.ping_failed", where=self.where, error=type(exc).__name__)
            return False
        return True

    async def aclose(self) -> None:
        await self.flush_later()
        executor, self._executor = self._executor, None
        if executor is not None:
            # Wait for the workers off the loop; normally they are idle already.
            await asyncio.to_thread(executor.shutdown, wait=True)
        if self._group is not None:
            await asyncio.to_thread(self._group.close)
        await asyncio.to_thread(self.sync_engine.dispose)
        await self.engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def open_engines(
    url: str, *, migrate: bool = True
) -> tuple[AsyncEngine, URL, Engine]:
    """The engines of the database at ``url``, its schema checked (or migrated) first:
    what :func:`open_database` and :func:`~geode.store.stores.open_store` build on."""
    parsed = normalize_url(url)
    engine = build_engine(parsed)
    try:
        await check_and_migrate(engine, parsed, migrate=migrate)
    except BaseException:
        await engine.dispose()
        raise
    return engine, parsed, build_sync_engine(parsed)


async def open_database(
    url: str, *, migrate: bool = True, secrets: tuple[str, ...] = ()
) -> Database:
    """Open the database at ``url``, applying every branch's migrations first unless
    ``migrate=False``.

    Args:
        url: ``sqlite:///PATH`` or ``postgresql+psycopg://USER@HOST:PORT/DB``.
        migrate: apply pending Alembic migrations (``geode serve`` does; tools that must
            not change the schema pass False and get an error if it is not current).
        secrets: literal secret values the records must mask wherever they occur.

    Raises:
        StoreError: corrupt or foreign database file, unreachable server, or a schema that
            is not at this version's heads (when ``migrate=False``).
        ConfigError: the URL is not one we support.
    """
    engine, parsed, sync_engine = await open_engines(url, migrate=migrate)
    return Database(engine=engine, url=parsed, secrets=tuple(secrets), sync_engine=sync_engine)
