"""Store.run_write_later: rows nothing waits on ride in the store's next write transaction
(SQLite group commit) instead of costing one of their own, and are never lost to a reader
of this process, to a failure of the write they ride with, or to closing the store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from geode.store import Store, open_store
from geode.store.models import sessions_table, timeline_table, usage_table, utcnow
from geode.store.usage import UsageFilter, UsageRecord

_S = sessions_table
_TL = timeline_table


def _row(turn: str) -> dict[str, Any]:
    return {"session_id": "s1", "turn_id": turn, "kind": "k", "correlation_id": "",
            "payload": {}, "created_at": utcnow()}


def _insert(turn: str) -> Any:
    def fn(conn: Connection) -> None:
        conn.execute(_TL.insert(), _row(turn))
    return fn


def _session(sid: str) -> Any:
    now = utcnow()

    def fn(conn: Connection) -> None:
        conn.execute(_S.insert(), {
            "id": sid, "created_at": now, "updated_at": now, "status": "active", "model": "m",
            "mode": "headless", "title": "", "parent_session_id": None, "metadata": {},
            "last_seq": 0, "message_count": 0})
    return fn


async def _raw_turns(store: Store) -> list[str]:
    """What another reader sees (the async engine: no flush_later)."""
    async with store.read() as conn:
        rows = await conn.execute(select(_TL.c.turn_id).order_by(_TL.c.id))
        return list(rows.scalars())


def _fail(errors: list[Exception]) -> Any:
    return errors.append


async def test_a_later_job_rides_in_the_next_write_transaction(sqlite_url: str) -> None:
    store = await open_store(sqlite_url)
    try:
        group = store._group
        assert group is not None
        errors: list[Exception] = []
        before = group.batches
        await store.run_write_later(_insert("a"), on_error=_fail(errors))
        await store.run_write_later(_insert("b"), on_error=_fail(errors))
        assert group.batches == before  # nothing started for them
        await store.run_write(_session("s1"))
        assert group.batches == before + 1  # one transaction: both later jobs and the write
        assert await _raw_turns(store) == ["a", "b"]  # committed with it, in their order
        assert errors == []
    finally:
        await store.aclose()


async def test_a_later_job_alone_is_committed_by_the_timer(sqlite_url: str) -> None:
    store = await open_store(sqlite_url)
    try:
        await store.run_write_later(_insert("alone"), on_error=_fail([]))
        for _ in range(400):  # no other write comes: the timer starts a batch for it
            if await _raw_turns(store) == ["alone"]:
                break
            await asyncio.sleep(0.01)
        assert await _raw_turns(store) == ["alone"]
    finally:
        await store.aclose()


async def test_flush_later_commits_the_waiting_jobs_now(store: Store) -> None:
    await store.run_write_later(_insert("x"), on_error=_fail([]))
    await store.flush_later()
    assert await _raw_turns(store) == ["x"]


async def test_a_failing_later_job_is_reported_and_spares_the_write_it_rides_with(
    sqlite_url: str,
) -> None:
    store = await open_store(sqlite_url)
    try:
        errors: list[Exception] = []

        def broken(conn: Connection) -> None:
            conn.execute(_TL.insert(), _row("half"))
            raise ValueError("boom")

        await store.run_write_later(broken, on_error=_fail(errors))
        await store.run_write(_session("kept"))  # rides with the failing job, commits
        async with store.read() as conn:
            ids = list((await conn.execute(select(_S.c.id))).scalars())
        assert ids == ["kept"]
        assert await _raw_turns(store) == []  # the failed job's savepoint was rolled back
        assert [type(e) for e in errors] == [ValueError]
    finally:
        await store.aclose()


async def test_closing_the_store_commits_waiting_jobs(sqlite_url: str) -> None:
    store = await open_store(sqlite_url)
    await store.run_write_later(_insert("at-close"), on_error=_fail([]))
    await store.aclose()
    store = await open_store(sqlite_url)
    try:
        assert await _raw_turns(store) == ["at-close"]
    finally:
        await store.aclose()


async def test_usage_sums_see_a_call_recorded_just_before(store: Store) -> None:
    # the spend check before the next model call must count the call just made
    await store.usage.record(UsageRecord(session_id="s", turn_id="t", input_tokens=5,
                                         output_tokens=7), at_ms=1)
    (totals,) = await store.usage.totals([UsageFilter(turn_id="t")])
    assert (totals.calls, totals.tokens) == (1, 12)
    await store.usage.record(UsageRecord(session_id="s", turn_id="t", input_tokens=1), at_ms=2)
    report = await store.usage.report(by="model")
    assert report[0][1].calls == 2
    async with store.read() as conn:
        assert (await conn.execute(select(func.count()).select_from(usage_table))).scalar() == 2


async def test_timeline_list_sees_rows_appended_just_before(store: Store) -> None:
    await store.timeline.append_many(session_id="s1", rows=[
        {"turn_id": "t1", "kind": "turn.started"}, {"turn_id": "t1", "kind": "turn.finished"}])
    assert [r.kind for r in await store.timeline.list("s1")] == ["turn.started", "turn.finished"]


@pytest.mark.postgres
async def test_postgresql_writes_a_later_job_at_once(pg_url: str) -> None:
    store = await open_store(pg_url)
    try:
        errors: list[Exception] = []
        await store.run_write_later(_insert("now"), on_error=_fail(errors))
        assert await _raw_turns(store) == ["now"]  # no group commit to ride in: written now

        def broken(conn: Connection) -> None:
            raise ValueError("boom")

        await store.run_write_later(broken, on_error=_fail(errors))
        assert [type(e) for e in errors] == [ValueError]
    finally:
        await store.aclose()
