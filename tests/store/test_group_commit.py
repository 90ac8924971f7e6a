"""SQLite group commit: write jobs that queue up together share one transaction, each in
its own savepoint; every caller still sees exactly its own job's outcome."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import Connection

from geode.store import Store, open_store
from geode.store.models import sessions_table, utcnow

_S = sessions_table


def _row(sid: str) -> dict[str, Any]:
    now = utcnow()
    return {"id": sid, "created_at": now, "updated_at": now, "status": "active", "model": "m",
            "mode": "headless", "title": "", "parent_session_id": None, "metadata": {},
            "last_seq": 0, "message_count": 0}


async def _ids(store: Store) -> list[str]:
    async with store.read() as conn:
        return list((await conn.execute(select(_S.c.id).order_by(_S.c.id))).scalars())


@pytest.fixture
async def store(sqlite_url: str) -> Any:
    async with await open_store(sqlite_url) as s:
        yield s


class _Gate:
    """Holds the first batch in its thread so the next writers queue up behind it."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def job(self, conn: Connection) -> str:
        conn.execute(_S.insert(), _row("gate"))
        self.entered.set()
        assert self.release.wait(10)
        return "gate"

    async def hold(self, store: Store) -> asyncio.Task[Any]:
        task = asyncio.create_task(store.run_write(self.job))
        assert await asyncio.to_thread(self.entered.wait, 10)
        return task


async def _queued(store: Store, *fns: Any) -> list[asyncio.Task[Any]]:
    """Writers started now, given a moment to queue (behind a held gate)."""
    tasks = [asyncio.create_task(store.run_write(fn)) for fn in fns]
    await asyncio.sleep(0.05)
    return tasks


def _insert(sid: str) -> Any:
    def job(conn: Connection) -> str:
        conn.execute(_S.insert(), _row(sid))
        return sid
    return job


def _fails_after_insert(sid: str) -> Any:
    def job(conn: Connection) -> None:
        conn.execute(_S.insert(), _row(sid))
        raise ValueError(f"{sid} failed")
    return job


async def test_queued_writers_share_a_transaction_and_get_their_own_results(
    store: Store,
) -> None:
    group = store._group
    assert group is not None
    gate = _Gate()
    held = await gate.hold(store)
    before = group.batches
    writers = await _queued(store, *(_insert(f"w{i:02}") for i in range(20)))
    gate.release.set()
    assert await held == "gate"
    assert await asyncio.gather(*writers) == [f"w{i:02}" for i in range(20)]
    assert group.batches - before == 1  # the 20 queued writers: one transaction
    assert await _ids(store) == ["gate", *(f"w{i:02}" for i in range(20))]


async def test_a_failing_job_is_rolled_back_alone(store: Store) -> None:
    gate = _Gate()
    held = await gate.hold(store)
    # the second "ok1" is a duplicate key: IntegrityError
    ok1, bad, dup, ok2 = await _queued(store, _insert("ok1"), _fails_after_insert("bad"),
                                       _insert("ok1"), _insert("ok2"))
    gate.release.set()
    await held
    assert await ok1 == "ok1" and await ok2 == "ok2"
    with pytest.raises(ValueError, match="bad failed"):
        await bad
    with pytest.raises(Exception, match="UNIQUE constraint failed"):
        await dup
    assert await _ids(store) == ["gate", "ok1", "ok2"]


async def test_a_broken_transaction_fails_every_job_in_it_and_commits_none(
    store: Store,
) -> None:
    def breaks(conn: Connection) -> None:
        conn.execute(_S.insert(), _row("breaker"))
        conn.exec_driver_sql("ROLLBACK")  # ends the batch's transaction under everybody

    gate = _Gate()
    held = await gate.hold(store)
    before, breaker, after = await _queued(store, _insert("before"), breaks, _insert("after"))
    gate.release.set()
    await held
    results = await asyncio.gather(before, breaker, after, return_exceptions=True)
    assert all(isinstance(r, Exception) for r in results), results
    assert await _ids(store) == ["gate"]  # nothing of that batch was committed
    assert await store.run_write(_insert("next")) == "next"  # the writer goes on
    assert await _ids(store) == ["gate", "next"]


async def test_a_writer_cancelled_while_queued_never_runs(store: Store) -> None:
    ran: list[str] = []

    def job(conn: Connection) -> None:
        ran.append("cancelled job")
        conn.execute(_S.insert(), _row("cancelled"))

    gate = _Gate()
    held = await gate.hold(store)
    queued, other = await _queued(store, job, _insert("other"))
    queued.cancel()
    await asyncio.sleep(0)
    gate.release.set()
    with pytest.raises(asyncio.CancelledError):
        await queued
    await held
    assert await other == "other"
    assert ran == []
    assert await _ids(store) == ["gate", "other"]


async def test_a_writer_cancelled_while_its_job_runs_is_rolled_back_alone(store: Store) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(conn: Connection) -> None:
        conn.execute(_S.insert(), _row("slow"))
        entered.set()
        assert release.wait(10)

    gate = _Gate()
    held = await gate.hold(store)
    first, victim, last = await _queued(store, _insert("first"), slow, _insert("last"))
    gate.release.set()
    await held
    assert await asyncio.to_thread(entered.wait, 10)
    victim.cancel()
    await asyncio.sleep(0.05)
    assert not victim.done()  # the caller waits until its job is out of the thread
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await victim
    assert await first == "first" and await last == "last"
    assert await _ids(store) == ["first", "gate", "last"]


async def test_a_lone_writer_is_its_own_transaction(store: Store) -> None:
    seen: list[int] = []

    def job(conn: Connection) -> None:
        seen.append(int(conn.execute(text("SELECT 1")).scalar_one()))
        conn.execute(_S.insert(), _row("alone"))

    group = store._group
    assert group is not None
    before = (group.batches, group.jobs)
    await store.run_write(job)
    assert (group.batches - before[0], group.jobs - before[1]) == (1, 1)
    assert seen == [1] and await _ids(store) == ["alone"]


async def test_the_writer_runs_no_task_of_its_own(store: Store) -> None:
    """Batches are driven by callbacks: no writer task exists that the loop's shutdown could
    cancel between a batch and the jobs queued behind it (each caller is cancelled alone,
    which the tests above cover)."""
    gate = _Gate()
    held = await gate.hold(store)
    queued = await _queued(store, _insert("queued"))
    current = asyncio.current_task()
    assert asyncio.all_tasks() == {current, held, *queued}
    gate.release.set()
    assert await held == "gate" and await queued[0] == "queued"
    assert await _ids(store) == ["gate", "queued"]


async def test_a_write_transaction_waiting_for_the_slot_goes_before_later_writers(
    store: Store,
) -> None:
    order: list[str] = []

    def job(name: str) -> Any:
        def run(conn: Connection) -> None:
            order.append(name)
            conn.execute(_S.insert(), _row(name))
        return run

    async def async_write(name: str) -> None:
        async with store.write() as conn:
            order.append(name)
            await conn.execute(_S.insert().values(**_row(name)))

    gate = _Gate()
    held = await gate.hold(store)
    writer = asyncio.create_task(async_write("async"))
    await asyncio.sleep(0.05)  # the async writer waits for the slot
    cancelled = asyncio.create_task(async_write("cancelled"))
    await asyncio.sleep(0.05)
    cancelled.cancel()  # a waiter that gives up takes no turn
    later = await _queued(store, job("later1"), job("later2"))
    gate.release.set()
    await asyncio.gather(held, writer, *later)
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert order == ["async", "later1", "later2"]
    assert await _ids(store) == ["async", "gate", "later1", "later2"]
    assert await store.run_write(job("next")) is None  # the slot is free again
