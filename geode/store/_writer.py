"""SQLite's writer: the process's writer slot, the group commit and its writer thread.

SQLite admits one writer per file. Inside one process :class:`WriterSlot` hands that
slot to one group-commit batch or one :meth:`Database.write` transaction at a time;
:class:`GroupCommit` runs the ``run_write`` jobs that queue up together as one
transaction (a savepoint each) in one long-lived :class:`WriterThread`. PostgreSQL uses
none of this. Knows engines and connections only, no record store.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import structlog
from sqlalchemy.engine import Connection, Engine

from geode.errors import StoreError
from geode.store._sqlite_cursor import FastConnection

__all__ = ["Abandoned", "GroupCommit", "WriterSlot", "WriterThread", "settle"]

log = structlog.get_logger("geode.store.database")


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


class WriterSlot:
    """This process's SQLite writer slot: held by one group-commit batch or one
    :meth:`Database.write` transaction at a time, handed on in arrival order.

    ``async with slot`` waits for it (:meth:`Database.write`); :meth:`take_then` runs a
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


class GroupCommit:
    """SQLite write jobs that queue up at once, run as one transaction (group commit).

    Writers wait for SQLite's single writer slot anyway; when several are waiting, the
    next hop to the worker thread takes them all (up to ``MAX_BATCH``): one ``BEGIN
    IMMEDIATE``, each job inside its own ``SAVEPOINT`` (a job that raises is rolled back
    alone and its caller gets the exception), one ``COMMIT``. Every caller gets its result
    only after that commit, so what a caller is told is committed is committed. A lone job
    runs exactly as before (no savepoint). The cost of a hop and a commit is shared by the
    batch: under a burst of channel replies this was a large share of each write. The
    batches run in one long-lived thread on one long-lived connection
    (:class:`WriterThread`).

    On the event loop a batch is driven by callbacks, not a task: the writer slot is taken
    (:class:`WriterSlot`), the batch handed to the writer thread, and the thread's
    completion delivers the outcomes, frees the slot and starts the next batch. Nothing
    here can be cancelled half-way: a caller cancelled while its job is queued has it
    skipped, one cancelled while it runs has it rolled back (it waits for the thread).
    """

    MAX_BATCH = 64
    #: a :meth:`later` job waits at most this long for another write to ride with
    LATER_S = 0.05

    def __init__(self, engine: Engine, slot: WriterSlot) -> None:
        self._engine = engine
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
        self._writer: WriterThread | None = None
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
                await settle(job.settled)
            raise

    def later(self, fn: Callable[[Connection], Any],
              on_error: Callable[[Exception], None]) -> None:
        """Queue ``fn`` for the next batch without starting one (``Database.run_write_later``);
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

        def work(writer: WriterThread) -> None:
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
                    self._writer = WriterThread(self._engine)
                writer = self._writer
        except RuntimeError as exc:  # no thread can start (the interpreter is exiting)
            self._done(batch, [], StoreError(f"the store's writer could not start: {exc}"))
            return
        writer.inbox.put(work)

    def _done(self, batch: list[_WriteJob], outcomes: list[tuple[bool, Any]],
              error: BaseException | None) -> None:
        """On the loop, the batch's transaction over: tell every caller, hand the slot on
        and start the next batch (after any :meth:`Database.write` that waits for the slot)."""
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

    def _run(self, writer: WriterThread, batch: list[_WriteJob]) -> list[tuple[bool, Any]]:
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
                outcomes.append((False, Abandoned()))
                continue
            if not single:
                raw.execute("SAVEPOINT geode_job")
            try:
                result = job.ctx.run(job.fn, fast)
                if job.abandoned:
                    raise Abandoned  # nobody waits for it: do not commit it
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
            GroupCommit._end(conn, raw)
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


class WriterThread:
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
        self.inbox: queue.SimpleQueue[Callable[[WriterThread], None] | None] = (
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
            GroupCommit._end(conn, conn.connection.driver_connection)
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


class Abandoned(Exception):
    """Raised inside a worker transaction whose caller was cancelled: roll it back."""


async def settle(fut: asyncio.Future[Any]) -> None:
    # Wait for a worker job to finish even if cancelled again meanwhile: the caller holds
    # the SQLite writer lock until the thread is out of its transaction. The caller
    # re-raises CancelledError afterwards, so swallowing repeats here loses nothing.
    while not fut.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({fut})
    if not fut.cancelled():
        fut.exception()  # mark retrieved: nobody else will look at it
