"""Reminders in the job store: a job bound to a thread, once or on a cron. The daemon's
scheduler never sees them (it runs the jobs without a thread), a layer's scoped store sees
only its bot's; a one-time reminder is claimed by exactly one of several claimants, keeps its
due time until it fired, and is disabled once it did (a failed firing is retried)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from geode.daemon import JobStore
from geode.daemon.scheduler import Scheduler
from geode.store import Store, open_store
from geode.store.jobs import Job

BOT = "chat:bot1:"
THREAD = BOT + "-100:7"
TARGET = {"channel": "-100", "thread_root": "7"}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, home: Path) -> AsyncIterator[Store]:
    url = (f"sqlite:///{home / 'geode.db'}" if request.param == "sqlite"
           else str(request.getfixturevalue("pg_url")))
    s = await open_store(url)
    try:
        yield s
    finally:
        await s.aclose()


async def test_scopes_keep_reminders_from_the_daemons_scheduler(store: Store) -> None:
    now = time.time()
    jobs = JobStore(store=store)
    plain = await jobs.add("* * * * * *", "tick", now=now - 5)
    mine = await jobs.add_reminder("check it", thread=THREAD, target=TARGET, created_by="42",
                                   at=now - 1, now=now - 10)
    await jobs.add_reminder("theirs", thread="chat:bot2:-100:7", target=TARGET,
                            created_by="42", at=now - 1, now=now - 10)
    assert [j.id for j in await jobs.due(now)] == [plain.id]
    assert [j.id for j in await JobStore(store=store, threads=BOT).due(now)] == [mine.id]
    # a LIKE wildcard in the prefix matches nothing more than itself
    assert await JobStore(store=store, threads="chat:bot_:").due(now) == []
    (listed,) = await jobs.in_thread(THREAD)
    assert (listed.target, listed.created_by, listed.once, listed.cron) == (TARGET, "42", True,
                                                                             "")
    assert len(await jobs.list()) == 3  # `geode schedule list` shows them all


async def test_a_one_time_reminder_fires_once_among_several_claimants(store: Store) -> None:
    now = time.time()
    jobs = JobStore(store=store, threads=BOT)
    job = await jobs.add_reminder("once", thread=THREAD, target=TARGET, created_by="42",
                                  at=now - 1, now=now - 10)
    claims = await asyncio.gather(*(jobs.claim(job, now=now, owner=f"d{i}") for i in range(5)))
    assert claims.count("run") == 1 and claims.count(None) == 4
    held = await jobs.get(job.id)
    assert held is not None and held.next_run == job.next_run and held.enabled  # until fired
    await jobs.finish(job.id, status="fired", session_id=None, owner="x", disable=True)
    done = await jobs.get(job.id)
    assert done is not None and not done.enabled and done.run_count == 1
    assert await jobs.due(now + 100) == [] and await jobs.in_thread(THREAD) == []


async def test_two_schedulers_fire_a_due_reminder_once_and_retry_a_failed_one(
    store: Store
) -> None:
    now = time.time()
    fired: list[tuple[str, str, int]] = []
    failing = {"yes": True}

    def runner(owner: str):  # type: ignore[no-untyped-def]
        async def run(job: Job, due: int) -> tuple[str, str | None]:
            if job.prompt == "flaky" and failing["yes"]:
                failing["yes"] = False
                raise RuntimeError("store hiccup")
            fired.append((owner, job.id, due))
            return "fired", None
        return run

    jobs = JobStore(store=store, threads=BOT)
    ok = await jobs.add_reminder("ok", thread=THREAD, target=TARGET, created_by="42",
                                 at=now - 1, now=now - 10)
    flaky = await jobs.add_reminder("flaky", thread=THREAD, target=TARGET, created_by="42",
                                    at=now - 1, now=now - 10)
    a, b = (Scheduler(jobs=JobStore(store=store, threads=BOT), run_job=runner(o), owner=o,
                      clock=lambda: now) for o in ("a", "b"))
    for _ in range(3):
        await asyncio.gather(a.tick(), b.tick())
        await asyncio.gather(a.wait_runs(), b.wait_runs())
    assert sorted(j for _, j, _ in fired) == sorted([ok.id, flaky.id])  # each once
    assert {j.id: j.enabled for j in await jobs.list()} == {ok.id: False, flaky.id: False}


async def test_a_reminder_is_stored_without_a_credential(store: Store) -> None:
    """The model's `schedule` call may carry a key one of its tools read in the turn: the
    reminder is at rest (and fires into the thread later) masked, as the checkpoint keeps
    the call itself."""
    from geode.secret_redaction import register_secret

    key = "reminder-held-key-5c1d2e3f4a"
    register_secret(key)
    jobs = JobStore(store=store, threads=BOT)
    job = await jobs.add_reminder(f"rotate {key} at noon", thread=THREAD, target=TARGET,
                                  created_by="42", at=time.time() + 60)
    (stored,) = await jobs.in_thread(THREAD)
    assert stored.id == job.id and key not in stored.prompt and key not in job.prompt
    assert stored.prompt == "rotate [REDACTED] at noon"
