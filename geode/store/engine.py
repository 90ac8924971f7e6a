"""Opening the store: one async SQLAlchemy engine for SQLite (aiosqlite) or PostgreSQL (psycopg 3).

SQLite writers are serialised in two layers:

* inside one process, a :class:`asyncio.Lock` per :class:`Store` admits one write
  transaction at a time. Waiting on it costs nothing and cannot time out, so 50 sessions
  saving at once queue up instead of racing for SQLite's single writer slot;
* across processes (``geode serve`` and a ``geode run`` on the same file), every write
  transaction starts with ``BEGIN IMMEDIATE``: the write lock is taken at BEGIN, where the
  5 s ``busy_timeout`` applies. A deferred transaction that reads and then tries to write
  can get SQLITE_BUSY at once, without waiting, which is the classic "database is locked".

Reads use deferred transactions and run concurrently with the writer (WAL mode).
PostgreSQL needs none of this: rows are locked with ``SELECT ... FOR UPDATE``.

Two ways in, same database, same statements:

* :meth:`Store.run_write` / :meth:`Store.run_read` run a *synchronous* function holding a
  whole transaction in one hop to a small worker-thread pool, on a sync engine (pysqlite /
  psycopg). The hot path (checkpoints, receipts, timeline, sessions) uses these: aiosqlite
  hops to its thread for every DBAPI call (~18 hops per checkpoint save), which made a
  save cost 4-5x what the SQL itself costs;
* :meth:`Store.write` / :meth:`Store.read` yield an ``AsyncConnection`` (aiosqlite /
  psycopg async) for code that awaits other things inside its transaction.

On SQLite the functions get the connection wrapped in
:class:`~geode.store._sqlite_cursor.FastConnection`, which runs the hot path's prebuilt
statements on the DBAPI cursor, compiled once (SQLAlchemy's own execution of a cached
statement cost several times SQLite's work).

Both take the same per-store SQLite writer lock, so they queue behind each other. On
SQLite, ``run_write`` jobs that queue up together are group-committed: one transaction, a
savepoint per job, one commit, and each caller told its own outcome after that commit.
"""

from __future__ import annotations

import ast
import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import functools
import os
import queue
import threading
import zlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import structlog
from sqlalchemy import create_engine, event, func, inspect, select, text
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from geode.errors import ConfigError, StoreError, StoreUnavailableError
from geode.store._sqlite_cursor import FastConnection
from geode.store.checkpoint import CheckpointStore, SessionCheckpointer
from geode.store.receipts import ReceiptStore
from geode.store.results import KeptResultStore
from geode.store.sessions import SessionStore
from geode.store.timeline import SessionTimeline
from geode.store.usage import UsageLedger

__all__ = ["Store", "head_revision", "normalize_url", "open_store", "upgrade"]

log = structlog.get_logger(__name__)

_HERE = Path(__file__).resolve().parent
BUSY_TIMEOUT_MS = 5_000
# Worker threads (and pooled sync connections, one each) per store. SQLite admits one
# writer at a time anyway; the others serve concurrent reads. PostgreSQL transactions on
# the hot path are a few statements long, so 4 in flight go a long way; more queue in
# the executor (never on the event loop).
SYNC_WORKERS = 4

_T = TypeVar("_T")
# Any 64-bit key: serialises concurrent `upgrade` runs of several replicas on one PG database.
_PG_MIGRATION_LOCK = zlib.crc32(b"geode.store.migrations")


def normalize_url(url: str) -> URL:
    """Map the accepted spellings onto the two async drivers we use.

    ``sqlite:///p`` / ``sqlite+aiosqlite:///p`` -> aiosqlite (``~`` and ``$VARS`` expanded);
    ``postgresql://``, ``postgres://``, ``postgresql+psycopg://`` -> psycopg 3 async.
    """
    try:
        parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    except ArgumentError as exc:
        raise ConfigError(f"store url {url!r} is not a database URL: {exc}") from exc
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        db = parsed.database or ""
        if db in ("", ":memory:") or db.startswith("file:"):
            raise ConfigError(
                "the store needs a file: use sqlite:///PATH (an in-memory database would "
                "lose every checkpoint at exit)"
            )
        path = Path(os.path.expandvars(db)).expanduser()
        return parsed.set(drivername="sqlite+aiosqlite", database=str(path))
    if backend == "postgresql":
        return parsed.set(drivername="postgresql+psycopg")
    raise ConfigError(
        f"unsupported store url scheme {parsed.drivername!r}: use sqlite:///PATH or "
        "postgresql+psycopg://USER@HOST/DB"
    )


def _where(url: URL) -> str:
    """Where the database is, for messages: the file path, or host:port/db (no password)."""
    if url.get_backend_name() == "sqlite":
        return str(url.database)
    return f"{url.host or 'localhost'}:{url.port or 5432}/{url.database or ''}"


def _private_db_file(path: Path) -> None:
    """Create the database file 0600 (its directory 0700) before SQLite opens it: it holds
    conversation text, secrets users pasted included. SQLite gives its -wal / -shm / journal
    files the database file's mode.

    Only a file that does not exist yet is created (``O_EXCL``); an existing one is never
    opened here. Closing ANY descriptor of a file drops every POSIX lock this process
    holds on it, SQLite's included (SQLite's "How To Corrupt An SQLite Database File",
    §2.2.1): with a connection of this process already open (the async engine's, when the
    sync engine is built), another process closing its last connection then believes it is
    alone and deletes the WAL this process still writes into. A file created here has no
    connection yet, so closing its only descriptor drops nothing.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return  # never touch an existing database file by descriptor
    os.close(fd)


def _build_engine(url: URL) -> AsyncEngine:
    if url.get_backend_name() == "sqlite":
        _private_db_file(Path(str(url.database)))
        engine = create_async_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000})
        _install_sqlite_hooks(engine.sync_engine)
        _install_sqlite_begin(engine.sync_engine)
        return engine
    return create_async_engine(
        url,
        pool_pre_ping=True,
        pool_size=10,
        max_overflow=20,
        connect_args={"connect_timeout": 10},
    )


def _build_sync_engine(url: URL) -> Engine:
    """The engine behind :meth:`Store.run_write` / :meth:`Store.run_read`.

    One pooled connection per worker thread, no overflow: a worker never waits for a
    connection, and the store never holds more than ``SYNC_WORKERS`` of them (SQLite: one
    more, the group commit's writer connection, kept checked out). No
    ``begin`` listener here: :meth:`Store._hop` emits SQLite's BEGIN itself, and an engine
    without connection-event listeners skips the event dispatch on every statement.
    """
    if url.get_backend_name() == "sqlite":
        _private_db_file(Path(str(url.database)))
        engine = create_engine(
            url.set(drivername="sqlite+pysqlite"),
            pool_size=SYNC_WORKERS + 1,
            max_overflow=0,
            # Connections move between the pool's worker threads (one at a time).
            connect_args={"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
        )
        _install_sqlite_hooks(engine)
        return engine
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=SYNC_WORKERS,
        max_overflow=0,
        connect_args={"connect_timeout": 10},
    )


def _install_sqlite_hooks(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # We emit BEGIN ourselves (below); the driver must not open transactions itself.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA journal_mode = WAL")
            # NORMAL under WAL: a commit survives a process crash (the crash tests kill
            # -9); only an OS crash / power loss can drop the last commits.
            cur.execute("PRAGMA synchronous = NORMAL")
            cur.execute("PRAGMA foreign_keys = ON")
            # A deleted row's bytes are overwritten with zeros, not left in a free page of
            # the file (conversation text and secrets a user pasted, after a rewind or a
            # redaction): a copy of the file must not hold what GEODE deleted.
            cur.execute("PRAGMA secure_delete = ON")
        finally:
            cur.close()


def _install_sqlite_begin(engine: Engine) -> None:
    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get("geode_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


class Store:
    """The durable store: engines, session factory and the record components.

    Build it with :func:`open_store`. Components: ``sessions``, ``checkpoints``,
    ``receipts``, ``timeline``; ``checkpointer(session_id)`` gives one session's chain.
    Transactions: :meth:`run_write` / :meth:`run_read` (a sync function, one thread hop,
    ``sync_engine``) or :meth:`write` / :meth:`read` (an ``AsyncConnection``, ``engine``).
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
        self.where = _where(url)
        self.secrets = secrets
        self._write_engine = engine.execution_options(geode_write=True)
        self.sync_engine = sync_engine if sync_engine is not None else _build_sync_engine(url)
        # SQLite reads begin explicitly (isolation_level=None); SQLite writes go through
        # _GroupCommit, which begins IMMEDIATE itself.
        self._sqlite_read_begin = "BEGIN" if self.dialect == "sqlite" else None
        # Created on first use and again after aclose(), so a closed store can be reused
        # like a disposed engine can.
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        # SQLite has one writer slot per file: queue writers of this process here (see
        # the module docstring). PostgreSQL locks rows, so no process-wide lock.
        self._write_lock: _WriterSlot | None = _WriterSlot() if self.dialect == "sqlite" else None
        self._group = (_GroupCommit(self, self._write_lock) if self._write_lock is not None
                       else None)
        self.session_factory: async_sessionmaker[AsyncSession] = async_sessionmaker(
            self._write_engine, expire_on_commit=False
        )
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
        fence: Callable[[Connection], None] | None = None,
        opening: Sequence[tuple[str, Mapping[str, Any], str]] = (),
    ) -> SessionCheckpointer:
        """The checkpoint chain of one session (the loop's ``Checkpointer``); ``fence`` and
        ``opening`` as in :class:`SessionCheckpointer`."""
        return SessionCheckpointer(store=self, session_id=session_id, fence=fence,
                                   opening=opening)

    async def run_write(self, fn: Callable[[Connection], _T]) -> _T:
        """Run ``fn(conn)`` as one write transaction in a worker thread; return its result.

        ``fn`` is synchronous and must not touch the event loop. The transaction commits
        when ``fn`` returns and rolls back if it raises (the exception propagates here).
        On SQLite it starts with ``BEGIN IMMEDIATE`` and holds this store's writer lock,
        the same lock :meth:`write` takes; writers that queue up at once share one
        transaction, each ``fn`` in its own savepoint (see :class:`_GroupCommit`).

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
        most ``_GroupCommit.LATER_S`` if no other write comes; :meth:`flush_later` (the
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
                raise _Abandoned  # cancelled while queued: do not start it at all
            with engine.connect() as conn:  # closing rolls back whatever is not committed
                if begin is not None:
                    # pysqlite runs with isolation_level=None (see the connect hook), so
                    # SQLite's transaction starts here.
                    conn.exec_driver_sql(begin)
                result = fn(cast(Connection, FastConnection(conn)) if sqlite else conn)
                if write:
                    if abandoned.is_set():
                        raise _Abandoned  # nobody waits for it: roll back, do not commit
                    conn.commit()
                return result

        ctx = contextvars.copy_context()  # structlog context vars, like asyncio.to_thread
        fut = asyncio.get_running_loop().run_in_executor(self._workers(), ctx.run, job)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            abandoned.set()
            await _settle(fut)
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

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@dataclass(eq=False, slots=True)
class _WriteJob:
    fn: Callable[[Connection], Any]
    ctx: contextvars.Context
    future: asyncio.Future[Any]
    #: set by the caller's cancellation, read by the worker thread (a plain attribute: one
    #: writer, and a stale read only runs the job, whose outcome nobody waits for, rolled
    #: back by the re-check after it)
    abandoned: bool = False
    #: the batch's transaction is over and the outcome delivered (on the loop)
    delivered: bool = False
    #: a cancelled caller waits on this until its job is out of the worker thread
    settled: asyncio.Future[None] | None = None


class _WriterSlot:
    """This process's SQLite writer slot: held by one group-commit batch or one
    :meth:`Store.write` transaction at a time, handed on in arrival order.

    ``async with slot`` waits for it (:meth:`Store.write`); :meth:`take_then` runs a
    callback once it is held, without a task of its own (the group commit: an
    ``asyncio.Lock`` needs an awaiting task, and a task per write transaction was a large
    part of the event loop's cost of a write).
    """

    def __init__(self) -> None:
        self._held = False
        self._waiters: collections.deque[asyncio.Future[None] | Callable[[], None]] = (
            collections.deque())

    def locked(self) -> bool:
        return self._held

    def take_then(self, start: Callable[[], None]) -> None:
        """Call ``start()`` holding the slot: now if it is free, else when handed on."""
        if self._held or self._waiters:
            self._waiters.append(start)
        else:
            self._held = True
            start()

    async def __aenter__(self) -> None:
        if not self._held and not self._waiters:
            self._held = True
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed to us just as we were cancelled: hand it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
            raise

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """Hand the slot to the next waiter, or free it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if isinstance(waiter, asyncio.Future):
                if not waiter.done():  # a cancelled waiter is skipped
                    waiter.set_result(None)
                    return
            else:
                waiter()
                return
        self._held = False


class _GroupCommit:
    """SQLite write jobs that queue up at once, run as one transaction (group commit).

    Writers wait for SQLite's single writer slot anyway; when several are waiting, the
    next hop to the worker thread takes them all (up to ``MAX_BATCH``): one ``BEGIN
    IMMEDIATE``, each job inside its own ``SAVEPOINT`` (a job that raises is rolled back
    alone and its caller gets the exception), one ``COMMIT``. Every caller gets its result
    only after that commit, so what a caller is told is committed is committed. A lone job
    runs exactly as before (no savepoint). The cost of a hop and a commit is shared by the
    batch: under a burst of channel replies this was a large share of each write. The
    batches run in one long-lived thread on one long-lived connection
    (:class:`_WriterThread`).

    On the event loop a batch is driven by callbacks, not a task: the writer slot is taken
    (:class:`_WriterSlot`), the batch handed to the writer thread, and the thread's
    completion delivers the outcomes, frees the slot and starts the next batch. Nothing
    here can be cancelled half-way: a caller cancelled while its job is queued has it
    skipped, one cancelled while it runs has it rolled back (it waits for the thread).
    """

    MAX_BATCH = 64
    #: a :meth:`later` job waits at most this long for another write to ride with
    LATER_S = 0.05

    def __init__(self, store: Store, slot: _WriterSlot) -> None:
        self._store = store
        self._slot = slot
        self._queue: list[_WriteJob] = []
        #: :meth:`later` jobs waiting for the next batch, the timer that starts one for
        #: them if no write comes, and every later job not yet delivered (flush_later)
        self._later: list[_WriteJob] = []
        self._later_timer: asyncio.TimerHandle | None = None
        self._later_open: set[asyncio.Future[Any]] = set()
        #: a batch is waiting for the slot or running
        self._active = False
        #: the thread (and connection) the batches run in, started with the first one
        self._writer: _WriterThread | None = None
        self._writer_lock = threading.Lock()
        #: transactions run and jobs in them (tests, diagnostics)
        self.batches = 0
        self.jobs = 0

    async def submit(self, fn: Callable[[Connection], Any]) -> Any:
        job = _WriteJob(fn=fn, ctx=contextvars.copy_context(),
                        future=asyncio.get_running_loop().create_future())
        self._queue.append(job)
        if not self._active:
            self._active = True
            self._slot.take_then(self._dispatch)
        try:
            # Not shielded: a cancelled caller's future is cancelled with it, and the
            # outcome is then dropped; ``settled`` says when the thread is out of the job.
            return await job.future
        except asyncio.CancelledError:
            job.abandoned = True  # not started: skipped; running: rolled back, not committed
            if not job.delivered:
                job.settled = asyncio.get_running_loop().create_future()
                await _settle(job.settled)
            raise

    def later(self, fn: Callable[[Connection], Any],
              on_error: Callable[[Exception], None]) -> None:
        """Queue ``fn`` for the next batch without starting one (``Store.run_write_later``);
        a timer starts one after ``LATER_S`` if no other write does."""
        loop = asyncio.get_running_loop()
        job = _WriteJob(fn=fn, ctx=contextvars.copy_context(), future=loop.create_future())
        open_ = self._later_open
        open_.add(job.future)

        def outcome(fut: asyncio.Future[Any]) -> None:
            open_.discard(fut)
            exc = None if fut.cancelled() else fut.exception()
            if exc is not None:
                try:
                    on_error(exc if isinstance(exc, Exception) else StoreError(repr(exc)))
                except Exception:
                    log.warning("store.later_error_handler_failed", exc_info=True)

        job.future.add_done_callback(outcome)
        if self._queue:
            # a batch is about to start (waiting for the slot): ride in it, in arrival order
            self._queue.append(job)
            return
        self._later.append(job)
        if self._later_timer is None:
            self._later_timer = loop.call_later(self.LATER_S, self._start_later)

    def _take_later(self) -> bool:
        """Move the waiting later jobs to the head of the queue (they were queued before
        what is there) and stop their timer; whether there were any."""
        if self._later_timer is not None:
            self._later_timer.cancel()
            self._later_timer = None
        if not self._later:
            return False
        self._queue[:0], self._later = self._later, []
        return True

    def _start_later(self) -> None:
        """Move the waiting later jobs into the queue and start a batch unless one is on."""
        if not self._take_later():
            return
        if not self._active:
            self._active = True
            self._slot.take_then(self._dispatch)

    async def flush_later(self) -> None:
        """Start the waiting later jobs now and wait until all of them are committed."""
        self._start_later()
        if self._later_open:
            await asyncio.wait(set(self._later_open))

    def _dispatch(self) -> None:
        """Holding the slot: hand the queued jobs (up to ``MAX_BATCH``) to a worker thread,
        whose completion comes back to :meth:`_done` on the loop. Later jobs waiting for a
        batch go first (they were queued before these)."""
        self._take_later()
        batch, self._queue = self._queue[: self.MAX_BATCH], self._queue[self.MAX_BATCH:]
        loop = asyncio.get_running_loop()

        def work(writer: _WriterThread) -> None:
            try:
                outcomes, error = self._run(writer, batch), None
            except BaseException as exc:  # the transaction failed: the whole batch did
                outcomes, error = [], exc
            try:
                loop.call_soon_threadsafe(self._done, batch, outcomes, error)
            except RuntimeError:  # the loop is closed: nobody is left to tell
                log.warning("store.writer_loop_closed", jobs=len(batch))

        try:
            with self._writer_lock:
                if self._writer is None:
                    self._writer = _WriterThread(self._store.sync_engine)
                writer = self._writer
        except RuntimeError as exc:  # no thread can start (the interpreter is exiting)
            self._done(batch, [], StoreError(f"the store's writer could not start: {exc}"))
            return
        writer.inbox.put(work)

    def _done(self, batch: list[_WriteJob], outcomes: list[tuple[bool, Any]],
              error: BaseException | None) -> None:
        """On the loop, the batch's transaction over: tell every caller, hand the slot on
        and start the next batch (after any :meth:`Store.write` that waits for the slot)."""
        try:
            self._deliver(batch, outcomes, error)
        finally:
            self._slot.release()
            if self._queue:
                self._slot.take_then(self._dispatch)
            else:
                self._active = False

    @staticmethod
    def _deliver(batch: list[_WriteJob], outcomes: list[tuple[bool, Any]],
                 error: BaseException | None) -> None:
        for job, (ok, value) in zip(batch, outcomes, strict=False):
            if not job.future.done():
                if ok:
                    job.future.set_result(value)
                else:
                    job.future.set_exception(value)
        for job in batch:  # the transaction itself failed: nothing of the batch committed
            if not job.future.done():
                job.future.set_exception(error or StoreError("write job without outcome"))
            job.delivered = True
            if job.settled is not None and not job.settled.done():
                job.settled.set_result(None)

    def _run(self, writer: _WriterThread, batch: list[_WriteJob]) -> list[tuple[bool, Any]]:
        """In the writer thread: the batch's one transaction; (ok, result or exception)
        each."""
        self.batches += 1
        self.jobs += len(batch)
        conn = writer.connection()
        try:
            return self._transaction(conn, batch)
        except BaseException:
            writer.roll_back(conn)
            raise

    @staticmethod
    def _transaction(conn: Connection, batch: list[_WriteJob]) -> list[tuple[bool, Any]]:
        single = len(batch) == 1
        outcomes: list[tuple[bool, Any]] = []
        raw = conn.connection.driver_connection
        assert raw is not None
        raw.execute("BEGIN IMMEDIATE")  # pysqlite runs with isolation_level=None
        fast = cast(Connection, FastConnection(conn))  # a Connection to the jobs
        for job in batch:
            if job.abandoned:
                outcomes.append((False, _Abandoned()))
                continue
            if not single:
                raw.execute("SAVEPOINT geode_job")
            try:
                result = job.ctx.run(job.fn, fast)
                if job.abandoned:
                    raise _Abandoned  # nobody waits for it: do not commit it
            except Exception as exc:
                if not single:
                    raw.execute("ROLLBACK TO SAVEPOINT geode_job")
                    raw.execute("RELEASE SAVEPOINT geode_job")
                outcomes.append((False, exc))
                continue
            if not single:
                raw.execute("RELEASE SAVEPOINT geode_job")
            outcomes.append((True, result))
        if any(ok for ok, _ in outcomes):
            conn.commit()
            if raw.in_transaction:  # SQLAlchemy saw no statement (a job used the driver)
                raw.commit()
        else:
            _GroupCommit._end(conn, raw)
        return outcomes

    @staticmethod
    def _end(conn: Connection, raw: Any) -> None:
        """Roll back whatever is open, in SQLAlchemy's bookkeeping and in SQLite."""
        conn.rollback()
        if raw.in_transaction:
            raw.rollback()

    def close(self) -> None:
        """Stop the writer thread once it is through what it was given, and return its
        connection (the store closes; blocking: call it off the loop). The next write,
        if any, starts a new one."""
        with self._writer_lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.stop()


class _WriterThread:
    """The thread SQLite's write transactions run in, one batch after the other, and its
    connection.

    One long-lived thread fed through a queue instead of a hop to the worker pool per
    transaction (the pool's submit, its future and idle semaphore were ~15 us of Python a
    transaction), and one long-lived connection instead of a pool checkout, reset and
    return per transaction (a quarter of a transaction's cost): SQLite admits one writer
    at a time anyway, and the writer slot gives this thread one batch at a time. A
    transaction that fails is rolled back on the connection; a connection that cannot roll
    back is dropped and the next batch checks out a new one. The connection is the
    thread's: it closes it when it stops.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.inbox: queue.SimpleQueue[Callable[[_WriterThread], None] | None] = (
            queue.SimpleQueue())
        self.conn: Connection | None = None
        # A daemon: an interpreter that exits without closing the store does not wait for
        # it; a transaction it had open is rolled back by SQLite.
        self._thread = threading.Thread(target=self._main, name="geode-store-writer",
                                        daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            while (work := self.inbox.get()) is not None:
                work(self)
        finally:
            conn, self.conn = self.conn, None
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()  # rolls back anything left open

    def connection(self) -> Connection:
        """The writer's connection, checked out of the pool once and kept."""
        conn = self.conn
        if conn is None or conn.closed or conn.invalidated:
            conn = self.conn = self._engine.connect()
        return conn

    def roll_back(self, conn: Connection) -> None:
        """After a failed transaction: roll it back, keeping the connection; a connection
        that cannot even roll back is dropped (the next batch checks out a new one)."""
        try:
            _GroupCommit._end(conn, conn.connection.driver_connection)
        except Exception:
            self.conn = None
            with contextlib.suppress(Exception):
                conn.invalidate()
            with contextlib.suppress(Exception):
                conn.close()

    def stop(self) -> None:
        """Let the thread finish what it was given, then stop it (blocking)."""
        self.inbox.put(None)
        self._thread.join()


class _Abandoned(Exception):
    """Raised inside a worker transaction whose caller was cancelled: roll it back."""


async def _settle(fut: asyncio.Future[Any]) -> None:
    # Wait for a worker job to finish even if cancelled again meanwhile: the caller holds
    # the SQLite writer lock until the thread is out of its transaction. The caller
    # re-raises CancelledError afterwards, so swallowing repeats here loses nothing.
    while not fut.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({fut})
    if not fut.cancelled():
        fut.exception()  # mark retrieved: nobody else will look at it


async def open_store(url: str, *, migrate: bool = True, secrets: tuple[str, ...] = ()) -> Store:
    """Open the store at ``url``, applying migrations first unless ``migrate=False``.

    Args:
        url: ``sqlite:///PATH`` or ``postgresql+psycopg://USER@HOST:PORT/DB``.
        migrate: apply pending Alembic migrations (``geode serve`` does; tools that must
            not change the schema pass False and get an error if it is not current).
        secrets: literal secret values the timeline must mask wherever they occur.

    Raises:
        StoreError: corrupt or foreign database file, unreachable server, or a schema that
            is not at this version's head (when ``migrate=False``).
        ConfigError: the URL is not one we support.
    """
    parsed = normalize_url(url)
    engine = _build_engine(parsed)
    try:
        await _check_and_migrate(engine, parsed, migrate=migrate)
    except BaseException:
        await engine.dispose()
        raise
    return Store(
        engine=engine, url=parsed, secrets=tuple(secrets), sync_engine=_build_sync_engine(parsed)
    )


async def upgrade(url: str) -> str:
    """Apply every pending migration (``geode db upgrade``). Returns the head revision."""
    parsed = normalize_url(url)
    engine = _build_engine(parsed)
    try:
        await _check_and_migrate(engine, parsed, migrate=True)
    finally:
        await engine.dispose()
    return head_revision()


def _alembic_config(connection: Connection | None = None) -> Any:
    from alembic.config import Config

    cfg = Config(str(_HERE / "alembic.ini"))
    cfg.set_main_option("script_location", str(_HERE / "migrations"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def _revisions() -> dict[str, tuple[str, ...]]:
    """Each shipped migration's revision id and the ids it follows, read from the version
    files without Alembic: opening a store that is already current (every start but the
    first after an upgrade) then never imports Alembic (~0.1 s and ~6 MB). The files
    cannot change while we run."""
    out: dict[str, tuple[str, ...]] = {}
    for path in sorted((_HERE / "migrations" / "versions").glob("*.py")):
        values: dict[str, Any] = {}
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            target: ast.expr
            if isinstance(node, ast.AnnAssign) and node.value is not None:
                target, value = node.target, node.value
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            else:
                continue
            if isinstance(target, ast.Name) and target.id in ("revision", "down_revision"):
                values[target.id] = ast.literal_eval(value)
        rev, down = values.get("revision"), values.get("down_revision")
        if not isinstance(rev, str):
            continue  # not a migration script
        follows = (down,) if isinstance(down, str) else tuple(down or ())
        out[rev] = follows
    return out


def head_revision() -> str:
    """The newest migration this GEODE ships."""
    revisions = _revisions()
    followed = {d for downs in revisions.values() for d in downs}
    heads = [r for r in revisions if r not in followed]
    assert len(heads) == 1, f"the shipped migrations must have one head, not {heads}"
    return heads[0]


def _inspect_state(conn: Connection) -> tuple[set[str], str | None]:
    tables = set(inspect(conn).get_table_names())
    version: str | None = None
    if "alembic_version" in tables:
        version = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    return tables, version


def _run_upgrade(conn: Connection) -> None:
    from alembic import command

    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")
    command.upgrade(_alembic_config(conn), "head")


async def _check_and_migrate(engine: AsyncEngine, url: URL, *, migrate: bool) -> None:
    where = _where(url)
    is_sqlite = url.get_backend_name() == "sqlite"
    advice = (
        "Run `geode db upgrade`, or restore the file from a backup (or move it away to "
        "start a new store)."
    )
    try:
        async with engine.connect() as conn:
            tables, version = await conn.run_sync(_inspect_state)
    except DBAPIError as exc:
        if is_sqlite:
            raise StoreError(
                f"the store file {where} is not a usable GEODE database "
                f"({_first_line(exc.orig)}). {advice}"
            ) from exc
        raise StoreUnavailableError(
            f"cannot reach the PostgreSQL store at {where} ({type(exc.orig).__name__}); "
            "check that the server runs and the [store] url"
        ) from exc
    except OSError as exc:
        raise StoreError(f"cannot open the store at {where}: {exc.strerror or exc}") from exc

    head = head_revision()
    if tables and version is None:
        raise StoreError(
            f"the database at {where} holds tables that are not GEODE's "
            f"({', '.join(sorted(tables)[:5])}) and no migration version. Point [store] url "
            f"at another database, or restore a GEODE backup there. {advice}"
        )
    if version is not None and version != head and not _known_revision(version):
        raise StoreError(
            f"the database at {where} is at schema revision {version!r}, unknown to this "
            f"GEODE (a newer version wrote it?). Upgrade GEODE or restore a backup."
        )
    if version == head:
        return
    if not migrate:
        raise StoreError(
            f"the store at {where} is at schema revision {version or 'none'}, this GEODE "
            f"needs {head}. Run `geode db upgrade` (back the database up first)."
        )
    try:
        async with engine.connect() as conn:
            conn = await conn.execution_options(geode_write=True)
            async with conn.begin():
                await conn.run_sync(_run_upgrade)
    except DBAPIError as exc:
        raise StoreError(
            f"migrating the store at {where} failed ({_first_line(exc.orig)}). {advice}"
        ) from exc
    log.info("store.migrated", where=where, from_revision=version, to_revision=head)


def _known_revision(rev: str) -> bool:
    return rev in _revisions()


def _first_line(exc: BaseException | None) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
