"""The dialect facts of the store: which URLs we accept, and how an engine is built for
SQLite (aiosqlite / pysqlite: WAL, ``busy_timeout``, ``secure_delete``, a private 0600
file, our own BEGIN) or PostgreSQL (psycopg 3, pooled, pre-pinged).

Used by :class:`~geode.store.database.Database` and by the migrations (``geode db``,
``alembic``); imports no record store.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from geode.errors import ConfigError

__all__ = [
    "BUSY_TIMEOUT_MS",
    "SYNC_WORKERS",
    "build_engine",
    "build_sync_engine",
    "normalize_url",
    "where",
]

BUSY_TIMEOUT_MS = 5_000
# Worker threads (and pooled sync connections, one each) per database. SQLite admits one
# writer at a time anyway; the others serve concurrent reads. PostgreSQL transactions on
# the hot path are a few statements long, so 4 in flight go a long way; more queue in
# the executor (never on the event loop).
SYNC_WORKERS = 4


#: ``scheme://user:PASSWORD@`` (and ``scheme//…`` mistyped): the password part of a URL, up
#: to the last ``@`` (a password may hold one; masking more than it is harmless)
_PASSWORD = re.compile(r"(//[^/@:]*:).*@")


def normalize_url(url: str) -> URL:
    """Map the accepted spellings onto the two async drivers we use.

    ``sqlite:///p`` / ``sqlite+aiosqlite:///p`` -> aiosqlite (``~`` and ``$VARS`` expanded);
    ``postgresql://``, ``postgres://``, ``postgresql+psycopg://`` -> psycopg 3 async.
    """
    try:
        parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is no number
        # the URL as written may hold the password: never in the message (it is printed
        # on stderr and logged); the rest says where the mistake is
        shown = _PASSWORD.sub(r"\1***@", url)
        why = str(exc) if isinstance(exc, ArgumentError) else "its port is not a number"
        raise ConfigError(f"store url {shown!r} is not a database URL: {why}") from None
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


def where(url: URL) -> str:
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


def build_engine(url: URL) -> AsyncEngine:
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


def build_sync_engine(url: URL) -> Engine:
    """The engine behind :meth:`Database.run_write` / :meth:`Database.run_read`.

    One pooled connection per worker thread, no overflow: a worker never waits for a
    connection, and the store never holds more than ``SYNC_WORKERS`` of them (SQLite: one
    more, the group commit's writer connection, kept checked out). No
    ``begin`` listener here: :meth:`Database._hop` emits SQLite's BEGIN itself, and an engine
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

