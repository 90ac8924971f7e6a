"""Store.run_write / run_read: one transaction per worker-thread hop, on both dialects."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import Connection

from geode.loop.protocols import TurnInfo
from geode.messages import Message
from geode.store import IllegalTransitionError, Store, open_store
from geode.store import _engines as engine_mod
from geode.store._engines import SYNC_WORKERS
from geode.store.models import sessions_table, utcnow

_S = sessions_table


def _session_row(sid: str) -> dict[str, Any]:
    now = utcnow()
    return {
        "id": sid,
        "created_at": now,
        "updated_at": now,
        "status": "active",
        "model": "m",
        "mode": "headless",
        "title": "",
        "parent_session_id": None,
        "metadata": {},
        "last_seq": 0,
        "message_count": 0,
    }


async def _ids(store: Store) -> list[str]:
    async with store.read() as conn:  # the async engine sees what the sync one committed
        return list((await conn.execute(select(_S.c.id).order_by(_S.c.id))).scalars())


async def _wait(event: threading.Event) -> None:
    """Wait for a worker-side event without blocking the loop."""
    assert await asyncio.to_thread(event.wait, 10)


async def test_run_write_commits_and_returns_the_result(store: Store) -> None:
    def insert(conn: Connection) -> int:
        conn.execute(_S.insert(), [_session_row("a"), _session_row("b")])
        return int(conn.execute(select(func.count()).select_from(_S)).scalar_one())

    assert await store.run_write(insert) == 2
    assert await _ids(store) == ["a", "b"]
    assert await store.run_read(lambda c: c.execute(select(_S.c.status)).scalars().all()) == [
        "active",
        "active",
    ]


async def test_run_write_rolls_back_everything_when_fn_raises(store: Store) -> None:
    def half_then_fail(conn: Connection) -> None:
        conn.execute(_S.insert(), _session_row("half"))
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await store.run_write(half_then_fail)
    assert await _ids(store) == []
    assert await store.sessions.count() == 0


async def test_sync_connections_get_the_sqlite_pragmas(sqlite_url: str) -> None:
    async with await open_store(sqlite_url) as store:

        def pragmas(conn: Connection) -> tuple[Any, ...]:
            return tuple(
                conn.exec_driver_sql(f"PRAGMA {p}").scalar()
                for p in ("journal_mode", "busy_timeout", "synchronous", "foreign_keys")
            )

        assert await store.run_read(pragmas) == ("wal", 5000, 1, 1)


async def test_the_event_loop_keeps_running_while_a_worker_transaction_is_open(
    store: Store,
) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(conn: Connection) -> bool:
        conn.execute(_S.insert(), _session_row("slow"))
        entered.set()
        # Only a coroutine on the loop sets this: a blocked loop would time out here.
        return release.wait(10)

    task = asyncio.create_task(store.run_write(slow))
    await _wait(entered)
    ticks = 0
    for _ in range(5):  # the loop runs other work meanwhile
        await asyncio.sleep(0)
        ticks += 1
    release.set()
    assert await task is True
    assert ticks == 5
    assert await _ids(store) == ["slow"]


async def test_a_cancelled_write_is_rolled_back(store: Store) -> None:
    entered, release = threading.Event(), threading.Event()

    def first(conn: Connection) -> None:
        conn.execute(_S.insert(), _session_row("cancelled"))
        entered.set()
        release.wait(10)

    task = asyncio.create_task(store.run_write(first))
    await _wait(entered)
    task.cancel()
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Nobody waited for the transaction: it rolled back instead of committing.
    assert await _ids(store) == []
    await store.run_write(lambda conn: conn.execute(_S.insert(), _session_row("next")))
    assert await _ids(store) == ["next"]


async def test_a_cancelled_writer_keeps_the_sqlite_slot_until_its_thread_is_out(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next writer of this process waits on the store's lock, not in SQLite.

    With busy_timeout 0, a second transaction that reached SQLite while the cancelled
    one still holds the file's write lock would fail at once with "database is locked".
    """
    monkeypatch.setattr(engine_mod, "BUSY_TIMEOUT_MS", 0)
    async with await open_store(sqlite_url) as store:
        entered, release = threading.Event(), threading.Event()
        order: list[str] = []

        def first(conn: Connection) -> None:
            conn.execute(_S.insert(), _session_row("cancelled"))
            entered.set()
            release.wait(10)
            order.append("first out")

        def second(conn: Connection) -> None:
            order.append("second")
            conn.execute(_S.insert(), _session_row("second"))

        task = asyncio.create_task(store.run_write(first))
        await _wait(entered)
        task.cancel()
        later = asyncio.create_task(store.run_write(second))
        await asyncio.sleep(0.2)  # room for a wrongly admitted second writer to hit SQLite
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        await later  # no "database is locked"
        assert order == ["first out", "second"]
        assert await _ids(store) == ["second"]


async def test_write_and_run_write_queue_on_one_sqlite_writer_lock(sqlite_url: str) -> None:
    async with await open_store(sqlite_url) as store:
        order: list[str] = []

        def worker(conn: Connection) -> None:
            order.append("run_write")
            conn.execute(_S.insert(), _session_row("w"))

        async with store.write() as conn:
            task = asyncio.create_task(store.run_write(worker))
            await asyncio.sleep(0)
            await asyncio.to_thread(lambda: None)  # give a worker thread every chance
            await conn.execute(_S.insert().values(**_session_row("async")))
            order.append("write exits")
        await task
        assert order == ["write exits", "run_write"]
        assert await _ids(store) == ["async", "w"]


async def test_worker_concurrency_and_connections_are_bounded(store: Store) -> None:
    lock = threading.Lock()
    reached, go = threading.Event(), threading.Event()
    active = peak = 0

    def read(conn: Connection) -> int:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
            if active == SYNC_WORKERS:
                reached.set()
        go.wait(10)
        value = int(conn.execute(text("SELECT 1")).scalar_one())
        with lock:
            active -= 1
        return value

    jobs = [asyncio.create_task(store.run_read(read)) for _ in range(SYNC_WORKERS + 3)]
    await _wait(reached)
    go.set()
    assert await asyncio.gather(*jobs) == [1] * (SYNC_WORKERS + 3)
    assert peak == SYNC_WORKERS
    assert store.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_closed_store_can_be_used_again_like_a_disposed_engine(store_url: str) -> None:
    store = await open_store(store_url)
    sid = await store.sessions.create(mode="headless", model="m")
    await store.aclose()
    try:
        assert await store.sessions.exists(sid)
    finally:
        await store.aclose()


def _turn(sid: str, rnd: int) -> TurnInfo:
    return TurnInfo(session_id=sid, turn_id="t", round=rnd, correlation_id="c", mode="headless")


async def test_a_status_changed_between_saves_is_what_the_next_save_sees(store: Store) -> None:
    """The checkpointer's one-statement fast path must notice a head it did not move."""
    sid = await store.sessions.create(mode="headless", model="m")
    cp = store.checkpointer(sid)
    msgs = [Message.user("one")]
    await cp.save(messages=msgs, state={}, status="active")
    await store.sessions.set_status(sid, "paused")

    msgs.append(Message.assistant("two"))
    await cp.save_batch_proposed(messages=msgs, state={"r": 1}, turn=_turn(sid, 1))
    rows = await store.checkpoints.list(sid)
    assert [(r.seq, r.status) for r in rows] == [(1, "active"), (2, "paused")]
    assert (await store.sessions.get(sid)).status == "paused"  # type: ignore[union-attr]

    await store.sessions.set_status(sid, "completed")
    msgs.append(Message.user("three"))
    with pytest.raises(IllegalTransitionError):
        await cp.save_batch_done(messages=msgs, state={"r": 1}, turn=_turn(sid, 1))
    restored = await store.checkpointer(sid).load()
    assert restored is not None and restored.seq == 2 and len(restored.messages) == 2


async def test_saves_after_a_load_continue_the_chain_without_rewriting(store: Store) -> None:
    sid = await store.sessions.create(mode="headless", model="m")
    msgs = [Message.user(f"m{i}") for i in range(5)]
    await store.checkpointer(sid).save(messages=msgs, state={}, status="active")

    resumed = store.checkpointer(sid)
    restored = await resumed.load()
    assert restored is not None
    grown = [*restored.messages, Message.user("m5"), Message.user("m6")]  # executemany
    await resumed.save_batch_proposed(messages=grown, state={"r": 2}, turn=_turn(sid, 2))
    grown.append(Message.user("m7"))  # a single new row
    await resumed.save_batch_done(messages=grown, state={"r": 2}, turn=_turn(sid, 2))

    again = await store.checkpointer(sid).load()
    assert again is not None and again.messages == grown and again.seq == 3
    head = await store.sessions.get(sid)
    assert head is not None and (head.last_seq, head.message_count) == (3, 8)
