"""The attacker's (or the operator's bad day's) view of today's waking scheduler, which now
sleeps until the next due time instead of polling: a wall-clock jump must neither hold a due
job back past the idle bound nor fire one early, and a reminder cancelled while the
scheduler sleeps towards its time (here or by another process) never fires."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from geode.daemon.scheduler import JobStore, Scheduler
from geode.store import Store, open_store
from geode.store.jobs import Job

BOT = "chat:bot1:"
THREAD = BOT + "-100:7"
TARGET = {"channel": "-100", "thread_root": "7"}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await open_store(f"sqlite:///{tmp_path / 'geode.db'}")
    try:
        yield s
    finally:
        await s.aclose()


class Fired:
    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    async def __call__(self, job: Job, due: int) -> tuple[str, str | None]:
        self.at.setdefault(job.id, time.monotonic())
        return "fired", None


async def until(cond: Callable[[], bool], within: float) -> None:
    end = time.monotonic() + within
    while not cond():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.02)


async def test_a_forward_clock_jump_fires_the_now_due_reminder_within_the_idle_bound(
        store: Store) -> None:
    offset = [0.0]
    fired = Fired()
    sched = Scheduler(jobs=JobStore(store=store, threads=BOT), run_job=fired, owner="me",
                      idle_s=1.0, clock=lambda: time.time() + offset[0])
    await sched.start()
    try:
        job = await JobStore(store=store).add_reminder(
            "in an hour", thread=THREAD, target=TARGET, created_by="42",
            at=int(time.time()) + 3600)
        await asyncio.sleep(1.5)
        assert not fired.at
        offset[0] = 3601.0  # NTP steps the wall clock an hour ahead
        jumped = time.monotonic()
        await until(lambda: job.id in fired.at, 10)
        assert fired.at[job.id] - jumped < 1.0 + 1.0
    finally:
        await sched.stop()
        await sched.wait_runs()


async def test_a_backward_clock_jump_never_fires_a_reminder_early(store: Store) -> None:
    offset = [0.0]
    fired = Fired()
    sched = Scheduler(jobs=JobStore(store=store, threads=BOT), run_job=fired, owner="me",
                      idle_s=0.5, clock=lambda: time.time() + offset[0])
    await sched.start()
    try:
        job = await JobStore(store=store).add_reminder(
            "soon", thread=THREAD, target=TARGET, created_by="42", at=int(time.time()) + 2)
        offset[0] = -3600.0  # the wall clock goes back an hour: the reminder is not due
        await asyncio.sleep(3.5)
        assert job.id not in fired.at
        offset[0] = 0.0
        await until(lambda: job.id in fired.at, 5)
    finally:
        await sched.stop()
        await sched.wait_runs()


@pytest.mark.parametrize("where", ["this process", "another process"])
async def test_a_reminder_cancelled_while_the_scheduler_sleeps_towards_it_never_fires(
        store: Store, tmp_path: Path, where: str) -> None:
    fired = Fired()
    sched = Scheduler(jobs=JobStore(store=store, threads=BOT), run_job=fired, owner="me",
                      idle_s=30.0)
    await sched.start()
    try:
        job = await JobStore(store=store).add_reminder(
            "soon", thread=THREAD, target=TARGET, created_by="42", at=int(time.time()) + 2)
        await asyncio.sleep(0.3)  # asleep until its due time now
        if where == "this process":
            assert await JobStore(store=store).remove(job.id)
        else:
            async with await open_store(f"sqlite:///{tmp_path / 'geode.db'}",
                                        migrate=False) as other:
                assert await JobStore(store=other).remove(job.id)
        await asyncio.sleep(3.5)
        assert job.id not in fired.at
        assert await JobStore(store=store).get(job.id) is None or not (
            await JobStore(store=store).due(time.time() + 60))
    finally:
        await sched.stop()
        await sched.wait_runs()
