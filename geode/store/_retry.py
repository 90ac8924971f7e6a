"""Transient store errors: which failures mean "the database went away for a moment", and
waiting for it to answer again.

A PostgreSQL restart (``pg_ctl restart``, a failover, a network blip) fails whatever runs on
the store at that moment: a connection is cut mid-statement ("terminating connection due to
administrator command", "server closed the connection unexpectedly"), and until the server
is back every new connection is refused ("Connection refused", "the database system is
starting up"). None of that says anything about the work that failed: the same operation
succeeds once the server answers. Callers therefore treat these errors as *transient*: they
retry with backoff (:func:`retry_transient`) or wait until the store answers
(:func:`wait_until_answers`) and then re-read what they were doing from the records, instead
of dropping the work.

What is transient (:func:`is_transient`, anywhere in the exception's cause/context chain):

* SQLAlchemy's ``DBAPIError`` with ``connection_invalidated`` (the driver said the
  connection is gone), ``DisconnectionError``, the pool's ``TimeoutError``;
* psycopg's ``OperationalError`` / ``InterfaceError`` without a SQLSTATE (a connection-level
  failure: refused, reset, closed) or with a connection one (class 08, 57P01-57P05 admin /
  crash shutdown, cannot connect now, 53300 too many connections), and serialization
  failures / deadlocks (40001, 40P01: the transaction was rolled back whole);
* SQLite's "database is locked" / "busy" (another process held the writer past the 5 s
  ``busy_timeout``; the engine's BEGIN IMMEDIATE makes this rare, it is still a wait);
* ``ConnectionError`` (refused, reset) and :class:`~geode.errors.StoreUnavailableError`.

Everything else (a constraint violation, a syntax error, a full disk, a lost lease) is a
real failure and is not retried here.

A write whose connection broke during COMMIT may have committed: whoever retries must make
the retry idempotent, or (as the channel layer does) re-read the records after the store is
back and continue from what they say.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import structlog
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from geode.errors import StoreUnavailableError

if TYPE_CHECKING:
    from geode.store.database import Database

__all__ = [
    "Backoff",
    "is_transient",
    "log_store_failure",
    "retry_transient",
    "wait_until_answers",
]

log = structlog.get_logger(__name__)

_T = TypeVar("_T")

#: SQLSTATEs of a lost / refused connection or a server shutting down or starting up
_TRANSIENT_STATES = ("08", "57P01", "57P02", "57P03", "57P04", "57P05", "53300", "40001",
                     "40P01")
_SQLITE_BUSY = ("database is locked", "database table is locked", "database is busy")


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes / contexts (each once, at most 16)."""
    seen: list[BaseException] = []
    todo: list[BaseException] = [exc]
    while todo and len(seen) < 16:
        e = todo.pop()
        if any(e is s for s in seen):
            continue
        seen.append(e)
        for nxt in (e.__cause__, e.__context__, getattr(e, "orig", None)):
            if isinstance(nxt, BaseException):
                todo.append(nxt)
    return seen


def _psycopg_transient(e: BaseException) -> bool:
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is a dependency of the PG extra only
        return False
    if isinstance(e, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected):
        return True
    if not isinstance(e, psycopg.OperationalError | psycopg.InterfaceError):
        return False
    state = getattr(e, "sqlstate", None)
    return state is None or str(state).startswith(_TRANSIENT_STATES)


def _one_transient(e: BaseException) -> bool:
    if isinstance(e, StoreUnavailableError | ConnectionError | sa_exc.DisconnectionError
                  | sa_exc.TimeoutError):
        return True
    if isinstance(e, sa_exc.DBAPIError) and e.connection_invalidated:
        return True
    if isinstance(e, sqlite3.OperationalError):
        msg = str(e).lower()
        return any(m in msg for m in _SQLITE_BUSY)
    return _psycopg_transient(e)


def is_transient(exc: BaseException) -> bool:
    """True if ``exc`` (or anything it was raised from) says the store was unreachable for a
    moment, not that the operation is wrong (see the module docstring)."""
    return any(_one_transient(e) for e in _chain(exc))


def log_store_failure(what: str, exc: BaseException, **kw: object) -> None:
    """One warning line for a failed store operation, naming the error class. Its traceback
    goes with it; ``geode.logging.throttle_tracebacks`` keeps one per distinct error a
    minute (a 10 s outage must not print thousands of lines of store frames)."""
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    log.warning(what, error_class=type(exc).__name__, error=first, exc_info=exc, **kw)


class Backoff:
    """Exponential waits: ``first``, doubling, at most ``cap`` seconds."""

    def __init__(self, *, first: float = 0.1, cap: float = 5.0) -> None:
        self.first = first
        self.cap = cap
        self.attempts = 0

    def next_wait(self) -> float:
        wait = min(self.cap, self.first * 2.0 ** min(self.attempts, 30))
        self.attempts += 1
        return wait

    async def sleep(self) -> None:
        await asyncio.sleep(self.next_wait())


async def retry_transient(
    op: Callable[[], Awaitable[_T]], *, what: str, deadline: float | None = None,
    backoff: Backoff | None = None,
) -> _T:
    """``await op()``, again after a backoff while it fails with a transient store error.

    Args:
        op: the operation; it must be safe to run again (idempotent, or re-reading what it
            acts on), because a failed COMMIT may have committed.
        what: the operation's name in the log line of each failure.
        deadline: ``time.monotonic()`` after which the last transient error is raised.
        backoff: the waits (default 0.1 s doubling to 5 s).

    Raises:
        Exception: a non-transient error at once; a transient one after ``deadline``.
    """
    backoff = backoff or Backoff()
    while True:
        try:
            return await op()
        except Exception as exc:
            if not is_transient(exc):
                raise
            log_store_failure(what, exc, attempt=backoff.attempts + 1)
            wait = backoff.next_wait()
            if deadline is not None and time.monotonic() + wait > deadline:
                raise
            await asyncio.sleep(wait)


async def wait_until_answers(
    store: Database, *, what: str = "store.unavailable", deadline: float | None = None,
    backoff: Backoff | None = None,
) -> bool:
    """Wait until ``store`` runs a trivial query again; False if ``deadline`` passed first.

    Logs the first failure and then one line per 30 s of waiting (not one per probe)."""
    backoff = backoff or Backoff(first=0.1, cap=2.0)
    started = time.monotonic()
    last_log = -1e9
    while True:
        try:
            await store.run_read(lambda conn: conn.execute(text("SELECT 1")).scalar())
        except Exception as exc:
            if not is_transient(exc):
                # Not a lost connection (e.g. a broken file): say so, and keep waiting for
                # an operator; the caller's work stays recorded.
                log_store_failure(what, exc)
            elif time.monotonic() - last_log >= 30.0:
                last_log = time.monotonic()
                log.warning(what, error=type(exc).__name__,
                            waited_s=round(time.monotonic() - started, 1))
            wait = backoff.next_wait()
            if deadline is not None and time.monotonic() + wait > deadline:
                return False
            await asyncio.sleep(wait)
            continue
        if backoff.attempts:
            log.info("store.available_again", waited_s=round(time.monotonic() - started, 1))
        return True
