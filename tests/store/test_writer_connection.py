"""SQLite's group commit runs its transactions in one long-lived writer thread on one
long-lived connection: no pool checkout per transaction, a failed transaction is rolled
back on it, a connection that cannot roll back is replaced, and closing the store stops
the thread and returns the connection."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import Connection

from geode.store import Store, open_store
from geode.store.models import sessions_table, utcnow

_S = sessions_table


def _insert(sid: str) -> Any:
    def job(conn: Connection) -> str:
        now = utcnow()
        conn.execute(_S.insert(), {
            "id": sid, "created_at": now, "updated_at": now, "status": "active", "model": "m",
            "mode": "headless", "title": "", "parent_session_id": None, "metadata": {},
            "last_seq": 0, "message_count": 0})
        return sid
    return job


async def _ids(store: Store) -> list[str]:
    return list(await store.run_read(
        lambda conn: conn.execute(select(_S.c.id).order_by(_S.c.id)).scalars().all()))


@pytest.fixture
async def store(sqlite_url: str) -> Any:
    async with await open_store(sqlite_url) as s:
        yield s


async def test_write_transactions_check_out_no_connection_after_the_first(store: Store) -> None:
    await store.run_write(_insert("first"))
    checkouts: list[int] = []
    event.listen(store.sync_engine, "checkout", lambda *a: checkouts.append(1))
    for i in range(5):
        await store.run_write(_insert(f"s{i}"))
    assert checkouts == []
    assert await _ids(store) == ["first", "s0", "s1", "s2", "s3", "s4"]


async def test_a_failed_transaction_leaves_the_writer_connection_clean(store: Store) -> None:
    def fails(conn: Connection) -> None:
        _insert("lost")(conn)
        raise ValueError("boom")

    def leaves_open(conn: Connection) -> None:
        # a job that opens nothing through SQLAlchemy but leaves rows in the transaction
        conn.connection.driver_connection.execute(
            "INSERT INTO sessions (id, created_at, updated_at, status, model, mode, title, "
            "metadata, last_seq, message_count) VALUES ('raw', '2026-01-01', '2026-01-01', "
            "'active', 'm', 'headless', '', '{}', 0, 0)")

    with pytest.raises(ValueError, match="boom"):
        await store.run_write(fails)
    await store.run_write(leaves_open)  # committed although SQLAlchemy saw no statement
    assert await store.run_write(_insert("after")) == "after"
    assert await _ids(store) == ["after", "raw"]
    group = store._group
    assert group is not None and group._writer is not None and group._writer.conn is not None
    raw = group._writer.conn.connection.driver_connection
    assert raw is not None and not raw.in_transaction


async def test_a_connection_that_cannot_roll_back_is_replaced(store: Store) -> None:
    await store.run_write(_insert("before"))
    group = store._group
    assert group is not None and group._writer is not None
    writer, broken = group._writer, group._writer.conn

    def breaks(conn: Connection) -> None:
        conn.connection.driver_connection.close()  # the driver connection is gone
        raise RuntimeError("the connection broke")

    with pytest.raises(Exception):  # noqa: B017 (the rollback's error, or the job's)
        await store.run_write(breaks)
    assert await store.run_write(_insert("after")) == "after"  # on a new connection
    assert group._writer is writer  # the same thread goes on
    assert writer.conn is not None and writer.conn is not broken
    assert await _ids(store) == ["after", "before"]


async def test_closing_the_store_returns_the_writer_connection(sqlite_url: str) -> None:
    store = await open_store(sqlite_url)
    await store.run_write(_insert("one"))
    pool: Any = store.sync_engine.pool
    assert pool.checkedout() == 1  # the writer's, kept between transactions
    writers = [t for t in threading.enumerate() if t.name == "geode-store-writer"]
    await store.aclose()
    assert pool.checkedout() == 0
    assert writers and not any(t.is_alive() for t in writers)  # the writer thread stopped
    # a closed store can be used again, like a disposed engine
    assert await store.run_write(_insert("two")) == "two"
    await store.aclose()
