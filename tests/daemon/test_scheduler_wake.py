"""The scheduler wakes at due times instead of polling: idle, it issues no query between its
wakes; a job this process adds wakes it at once; a job another process adds (another
database object on the same store, as a second replica or ``geode schedule add`` has) is
seen within ``idle_s``; a one-time job another daemon's dead run still leases fires when the
lease ends, not one idle bound later."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from geode.daemon.scheduler import JobStore, Scheduler
from geode.store import Store, open_store
from geode.store.jobs import Job

BOT = "chat:bot1:"
THREAD = BOT + "-100:7"
TARGET = {"channel": "-100", "thread_root": "7"}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, home: Path) -> str:
    return (f"sqlite:///{home / 'geode.db'}" if request.param == "sqlite"
            else str(request.getfixturevalue("pg_url")))


@pytest.fixture
async def store(url: str) -> AsyncIterator[Store]:
    s = await open_store(url)
    try:
        yield s
    finally:
        await s.aclose()


def count_statements(store: Store) -> list[str]:
    """Every SQL statement the store's engines send, from now on."""
    seen: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_a: Any) -> None:
        seen.append(statement)

    for engine in {store.engine.sync_engine, store.sync_engine}:
        event.listen(engine, "before_cursor_execute", before)
    return seen


class Fired:
    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    async def __call__(self, job: Job, due: int) -> tuple[str, str | None]:
        self.at.setdefault(job.id, time.time())
        return "fired", None


async def until(cond: Callable[[], bool], within: float) -> None:
    end = time.monotonic() + within
    while not cond():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.02)


async def test_an_idle_scheduler_queries_nothing_between_its_wakes(store: Store) -> None:
    seen = count_statements(store)
    sched = Scheduler(jobs=JobStore(store=store, threads=BOT), run_job=Fired(), owner="me")
    assert sched.idle_s == 30.0  # the default bound, at the default 1 s tick
    slow = Scheduler(jobs=JobStore(store=store), run_job=Fired(), owner="me", tick_s=5)
    assert slow.idle_s == 30.0  # never longer: a pass beats well within the staleness bound
    await sched.start()
    try:
        await until(lambda: bool(seen), 5)  # the first pass: one read
        await asyncio.sleep(0.3)
        first = len(seen)
        await asyncio.sleep(2.5)  # a polling scheduler would have read twice more
        assert len(seen) == first, seen[first:]
    finally:
        await sched.stop()


async def test_a_reminder_this_process_adds_wakes_the_scheduler_at_its_time(
    store: Store
) -> None:
    fired = Fired()
    sched = Scheduler(jobs=JobStore(store=store, threads=BOT), run_job=fired, owner="me")
    await sched.start()
    try:
        await asyncio.sleep(0.3)  # asleep for up to 30 s now
        at = int(time.time()) + 2
        # another JobStore on the same database object, as /remind's is
        job = await JobStore(store=store).add_reminder(
            "soon", thread=THREAD, target=TARGET, created_by="42", at=at)
        await until(lambda: job.id in fired.at, 10)
        assert at <= fired.at[job.id] < at + 5  # at its time, not at the next idle wake
        await sched.wait_runs()
        done = await JobStore(store=store).get(job.id)
        assert done is not None and not done.enabled  # fired once
    finally:
        await sched.stop()


async def test_a_job_another_process_adds_runs_within_the_idle_bound(
    store: Store, url: str
) -> None:
    fired = Fired()
    sched = Scheduler(jobs=JobStore(store=store), run_job=fired, owner="me", idle_s=2.0)
    await sched.start()
    try:
        await asyncio.sleep(0.3)
        async with await open_store(url, migrate=False) as other:  # another process's
            added = time.time()
            job = await JobStore(store=other).add("* * * * * *", "tick")
        await until(lambda: job.id in fired.at, 10)
        # due within a second of being added; seen at the latest one idle bound later
        assert fired.at[job.id] - added < 1 + 2.0 + 1.5
    finally:
        await sched.stop()
        await sched.wait_runs()


async def test_a_one_time_reminder_a_dead_run_leases_fires_when_the_lease_ends(
    store: Store
) -> None:
    now = time.time()
    jobs = JobStore(store=store, threads=BOT)
    job = await jobs.add_reminder("once", thread=THREAD, target=TARGET, created_by="42",
                                  at=now - 1, now=now - 10)
    # another daemon claimed it and died: its run lease (about 2 s) must run out first
    assert await jobs.claim(job, now=now, owner="dead", lease_s=1.0) == "run"
    held = await jobs.get(job.id)
    assert held is not None and held.running_until is not None
    fired = Fired()
    sched = Scheduler(jobs=jobs, run_job=fired, owner="me")  # idle bound 30 s
    await sched.start()
    try:
        await until(lambda: job.id in fired.at, 10)
        assert fired.at[job.id] >= held.running_until  # not before the lease ended
        await sched.wait_runs()
        done = await jobs.get(job.id)
        assert done is not None and not done.enabled and done.run_count == 2
    finally:
        await sched.stop()
