"""The SQLite store beside other processes: nothing this process does may drop its locks.

Closing ANY descriptor of a file drops every POSIX lock the process holds on it, SQLite's
included. The store used to ``os.close(os.open(db))`` when it built its second engine, with
the first one's connection open (issue #30 finding 1): the next process to close its last
connection then believed it was alone and deleted the WAL this process kept writing into.
The same happens if a file tool opens (and closes) a hard link to the live store before it
refuses it. Each test here keeps a store open, lets another process open, read and close
the file, and checks the WAL is still ours: not deleted, and what we write is seen.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from geode.store import Store, open_store
from geode.store import _engines as engine_mod
from geode.tools.builtin import read_workspace_bytes
from geode.tools.errors import ToolFailure
from tests.security.conftest import make_ctx


def _deleted_store_fds(db: Path) -> list[str]:
    out = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(str(db)) and target.endswith("(deleted)"):
            out.append(target)
    return out


def _other_process_counts_sessions(db: Path) -> int:
    """What `geode sessions list` does to the file: open, read, close its last connection."""
    code = ("import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1])\n"
            "print(c.execute('SELECT count(*) FROM sessions').fetchone()[0])\n"
            "c.close()\n")
    out = subprocess.run([sys.executable, "-c", code, str(db)], check=True,
                         capture_output=True, text=True, timeout=60)
    return int(out.stdout)


async def _open(db: Path) -> Store:
    store = await open_store(f"sqlite:///{db}")
    await store.sessions.create(mode="REPL", model="m")  # the WAL is in use from here
    return store


async def test_another_process_closing_the_file_leaves_our_wal(tmp_path: Path) -> None:
    db = tmp_path / "home" / "geode.db"
    store = await _open(db)
    try:
        assert _other_process_counts_sessions(db) == 1
        assert _deleted_store_fds(db) == []
        assert Path(f"{db}-wal").exists()
        await store.sessions.create(mode="REPL", model="m")  # written after the read...
        assert _other_process_counts_sessions(db) == 2  # ...is seen by the next one
        assert _deleted_store_fds(db) == []
    finally:
        await store.aclose()


async def test_a_second_store_on_the_same_file_in_one_process_keeps_the_locks(
    tmp_path: Path,
) -> None:
    db = tmp_path / "home" / "geode.db"
    store = await _open(db)
    try:
        async with await open_store(f"sqlite:///{db}") as again:  # e.g. the console's
            assert len(await again.sessions.list(10)) == 1
        assert _other_process_counts_sessions(db) == 1
        assert _deleted_store_fds(db) == []
        await store.sessions.create(mode="REPL", model="m")
        assert _other_process_counts_sessions(db) == 2
    finally:
        await store.aclose()


def test_the_file_is_created_0600_and_an_existing_one_is_never_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "home" / "geode.db"
    engine_mod._private_db_file(db)
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700

    opened: list[object] = []
    real_open = os.open

    def spy(path: object, *args: object, **kw: object) -> int:
        fd = real_open(path, *args, **kw)  # type: ignore[arg-type]
        opened.append(path)  # only a descriptor that was actually opened
        return fd

    monkeypatch.setattr(engine_mod.os, "open", spy)
    engine_mod._private_db_file(db)  # exists now: never opened, so never closed
    assert opened == []


async def test_a_hard_link_to_the_live_store_is_refused_without_dropping_its_locks(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    db = home / "geode.db"
    store = await _open(db)
    ws = home / "workspaces" / "w"
    ws.mkdir(parents=True)
    os.link(db, ws / "x")
    try:
        with pytest.raises(ToolFailure, match="GEODE's own files"):
            read_workspace_bytes(make_ctx(ws, protected_paths=(home,)), "x", max_bytes=1 << 20)
        assert _other_process_counts_sessions(db) == 1
        assert _deleted_store_fds(db) == [], "the refused read closed a fd of the live store"
        await store.sessions.create(mode="REPL", model="m")
        assert _other_process_counts_sessions(db) == 2
    finally:
        await store.aclose()


async def test_a_deleted_rows_secret_is_not_left_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """secure_delete (issue #30 finding 9): a row GEODE deleted is zeroed in the database
    file, not left in a free page where a copy of the file would still hold it.

    Some SQLite builds (Debian's) default to secure_delete on, most (the amalgamation,
    macOS, many wheels) do not: every connection here starts as such a build would, with
    it OFF, before the store's own connect hook runs."""
    from sqlalchemy import event, text

    real_install = engine_mod._install_sqlite_hooks

    def install(engine: Any) -> None:
        @event.listens_for(engine, "connect")
        def _build_default_off(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.execute("PRAGMA secure_delete = OFF")

        real_install(engine)

    monkeypatch.setattr(engine_mod, "_install_sqlite_hooks", install)

    # not credential-shaped: the store masks those before they are written at all
    secret = "a private note the user deleted: launch-code-4711-purple-walrus"
    db = tmp_path / "home" / "geode.db"
    store = await _open(db)
    try:
        sid = await store.sessions.create(mode="REPL", model="m", title=secret)
        await store.sessions.create(mode="REPL", model="m", title="kept")

        def checkpoint(conn: Any) -> None:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")

        await store.run_read(checkpoint)
        assert secret.encode() in db.read_bytes()  # the row is in the file

        await store.run_write(lambda conn: conn.execute(
            text("DELETE FROM sessions WHERE id = :id"), {"id": sid}))
        await store.run_read(checkpoint)  # the WAL's pages back into the file, WAL emptied
        assert Path(f"{db}-wal").stat().st_size == 0
        assert secret.encode() not in db.read_bytes()
    finally:
        await store.aclose()
