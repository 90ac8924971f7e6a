"""Scheduler: jobs in the store, claimed once per due time, run in SCHEDULER mode."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from geode.daemon import JobStore
from geode.daemon.scheduler import Scheduler, next_after, validate_tz
from geode.errors import ConfigError
from geode.store import Store, open_store
from geode.store.models import jobs_table, sessions_table, timeline_table
from tests.daemon.conftest import DaemonMaker, start_serve, write_script

WRITE = {"tool": "write_file", "input": {"path": "sched.txt", "content": "x"}}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, home: Path) -> AsyncIterator[Store]:
    url = (f"sqlite:///{home / 'geode.db'}" if request.param == "sqlite"
           else str(request.getfixturevalue("pg_url")))
    s = await open_store(url)
    try:
        yield s
    finally:
        await s.aclose()


async def test_jobs_are_added_listed_and_removed(store: Store) -> None:
    jobs = JobStore(store=store)
    now = 1_800_000_000  # 2027-01-15 08:00:00 UTC
    job = await jobs.add("0 9  * * 1-5", "standup notes", session_id="s-x", now=now)
    assert job.cron == "0 9 * * 1-5" and job.next_run == next_after("0 9 * * 1-5", now)
    assert [j.id for j in await jobs.list()] == [job.id]
    assert await jobs.remove(job.id) is True
    assert await jobs.remove(job.id) is False
    assert await jobs.list() == []
    with pytest.raises(ConfigError, match="invalid cron"):
        await jobs.add("every monday", "x")
    with pytest.raises(ConfigError, match="invalid cron"):
        await jobs.add("61 * * * *", "x")


def test_a_cron_in_a_time_zone_keeps_local_time_across_daylight_saving() -> None:
    from datetime import UTC, datetime

    def utc(ts: int) -> str:
        return datetime.fromtimestamp(ts, UTC).strftime("%m-%d %H:%M")

    # Berlin moves to summer time on 2027-03-28: 09:00 local is 08:00Z before, 07:00Z after
    before = datetime(2027, 3, 26, 12, tzinfo=UTC).timestamp()
    first = next_after("0 9 * * *", before, "Europe/Berlin")
    second = next_after("0 9 * * *", first, "Europe/Berlin")
    third = next_after("0 9 * * *", second, "Europe/Berlin")
    assert [utc(first), utc(second), utc(third)] == ["03-27 08:00", "03-28 07:00", "03-29 07:00"]
    assert utc(next_after("0 9 * * *", before)) == "03-27 09:00"  # no zone: UTC
    assert validate_tz("America/New_York") == "America/New_York"
    assert validate_tz("UTC") is None and validate_tz(None) is None
    with pytest.raises(ConfigError, match="unknown time zone 'Mars/Olympus'"):
        validate_tz("Mars/Olympus")


async def test_a_job_with_a_time_zone_is_claimed_in_it(store: Store) -> None:
    jobs = JobStore(store=store)
    now = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC = 03:00 in New York
    job = await jobs.add("30 9 * * *", "standup", tz="America/New_York", now=now)
    assert job.tz == "America/New_York"
    assert job.next_run == int(now) + 6 * 3600 + 30 * 60  # 09:30 New York = 14:30Z
    assert (await jobs.get(job.id)) == job
    assert await jobs.claim(job, now=job.next_run, owner="a") == "run"
    after = await jobs.get(job.id)
    assert after is not None and after.next_run == job.next_run + 24 * 3600
    with pytest.raises(ConfigError, match="unknown time zone"):
        await jobs.add("* * * * *", "x", tz="Europe/Atlantis")


async def test_one_due_time_is_claimed_by_exactly_one_claimant(store: Store) -> None:
    jobs = JobStore(store=store)
    job = await jobs.add("* * * * * *", "tick", now=time.time() - 5)
    claims = await asyncio.gather(
        *(jobs.claim(job, now=job.next_run + 1, owner=f"d{i}") for i in range(5))
    )
    assert claims.count("run") == 1 and claims.count(None) == 4
    after = await jobs.get(job.id)
    assert after is not None and after.run_count == 1 and after.next_run > job.next_run


async def _lease(store: Store, job_id: str) -> tuple[str | None, int | None]:
    async with store.read() as conn:
        row = (await conn.execute(select(jobs_table.c.running_by, jobs_table.c.running_until)
                                  .where(jobs_table.c.id == job_id))).one()
    return row.running_by, row.running_until


async def test_a_run_still_going_in_one_daemon_is_not_started_again_by_another(
    store: Store,
) -> None:
    jobs = JobStore(store=store)
    now = [1_800_000_000.0]
    job = await jobs.add("*/5 * * * *", "long report", now=now[0] - 60)
    release = asyncio.Event()
    ran: list[str] = []

    def runner(name: str) -> Any:
        async def run(_job: object, _due: int) -> tuple[str, str | None]:
            ran.append(name)
            await release.wait()
            return "natural", None
        return run

    # the fake clock jumps 5 min at once: a lease of 10 min outlasts it without renewals
    a = Scheduler(jobs=jobs, run_job=runner("a"), owner="a", lease_s=600, clock=lambda: now[0])
    b = Scheduler(jobs=jobs, run_job=runner("b"), owner="b", clock=lambda: now[0])
    assert await a.tick() == [job.id]
    await asyncio.sleep(0)
    assert await _lease(store, job.id) == ("a", int(now[0] + 600) + 1)

    now[0] += 300  # due again while a's run goes on: b claims the due time, skips it
    assert await b.tick() == []
    skipped = await jobs.get(job.id)
    assert skipped is not None
    assert (skipped.last_status, skipped.run_count) == ("skipped: still running", 1)
    assert skipped.next_run > now[0]  # that due time is gone, not retried

    release.set()
    await a.wait_runs()
    assert await _lease(store, job.id) == (None, None)  # released at the end of the run
    done = await jobs.get(job.id)
    assert done is not None and done.last_status == "natural"

    now[0] += 300
    assert await b.tick() == [job.id]  # the next due time runs, in whichever daemon
    await b.wait_runs()
    assert ran == ["a", "b"]


async def test_the_lease_of_a_dead_daemon_runs_out(store: Store) -> None:
    jobs = JobStore(store=store)
    now = 1_800_000_000.0
    job = await jobs.add("* * * * *", "x", now=now - 60)
    assert await jobs.claim(job, now=now, owner="dead", lease_s=60) == "run"  # never finishes
    job = await jobs.get(job.id) or job
    assert await jobs.claim(job, now=now + 30, owner="b", lease_s=60) == "overlap"
    job = await jobs.get(job.id) or job
    assert await jobs.claim(job, now=now + 61.5, owner="b", lease_s=60) == "run"
    assert await _lease(store, job.id) == ("b", int(now + 61.5 + 60) + 1)


async def test_a_long_run_renews_its_lease(store: Store) -> None:
    jobs = JobStore(store=store)
    now = [1_800_000_000.0]
    job = await jobs.add("* * * * *", "x", now=now[0] - 60)
    release = asyncio.Event()

    async def run(_job: object, _due: int) -> tuple[str, str | None]:
        await release.wait()
        return "natural", None

    a = Scheduler(jobs=jobs, run_job=run, owner="a", lease_s=0.3, clock=lambda: now[0])
    assert await a.tick() == [job.id]
    now[0] += 3600  # an hour on: only renewals keep the lease
    for _ in range(200):
        if (await _lease(store, job.id))[1] == int(now[0] + 0.3) + 1:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the lease was never renewed")
    job = await jobs.get(job.id) or job
    assert await jobs.claim(job, now=now[0], owner="b") == "overlap"
    release.set()
    await a.wait_runs()


async def test_missed_runs_after_downtime_run_once_then_continue(store: Store) -> None:
    jobs = JobStore(store=store)
    now = time.time()
    job = await jobs.add("*/5 * * * *", "report", now=now - 3 * 3600)  # due 3 h ago
    ran: list[str] = []

    async def run(j: object, _due: int) -> tuple[str, str | None]:
        ran.append("run")
        return "natural", None

    sched = Scheduler(jobs=jobs, run_job=run, owner="me", clock=lambda: now)
    assert await sched.tick() == [job.id]
    await sched.wait_runs()
    assert await sched.tick() == []  # the backlog of ~36 missed times is not replayed
    after = await jobs.get(job.id)
    assert after is not None and ran == ["run"]
    assert after.next_run == next_after("*/5 * * * *", now) and after.next_run > now
    assert after.last_status == "natural"


async def test_a_due_job_runs_in_scheduler_mode_denied_and_in_the_timeline(
    make_daemon: DaemonMaker, home: Path
) -> None:
    d = await make_daemon([WRITE, "could not write"], scheduler_tick_s=0.2, workspace=home)
    store = d.runtime.store  # type: ignore[union-attr]
    jobs = JobStore(store=store)
    job = await jobs.add("* * * * * *", "write the file")
    for _ in range(300):
        j = await jobs.get(job.id)
        if j is not None and j.last_session_id and j.last_status:
            break
        await asyncio.sleep(0.02)
    assert j is not None and j.last_status == "natural", j
    sid = j.last_session_id
    record = await store.sessions.get(sid)
    assert record is not None and record.mode == "SCHEDULER"
    rows = await store.timeline.list(sid)
    kinds = [r.kind for r in rows]
    assert kinds[0] == "schedule.run_started" and "schedule.run_finished" in kinds
    denied = [r for r in rows if r.kind == "tool.denied"]
    assert denied and denied[0].payload["check"] == "policy"  # nobody to ask ⇒ denied
    assert "SCHEDULER" in denied[0].payload["reason"]
    assert not (home / "sched.txt").exists()


@pytest.mark.postgres
@pytest.mark.slow
async def test_two_daemons_on_one_postgresql_never_run_a_due_time_twice(
    pg_url: str, tmp_path: Path, home: Path
) -> None:
    async with await open_store(pg_url) as store:
        job = await JobStore(store=store).add("* * * * * *", "tick")
    script = write_script(home / "tick.json", ["tock"])
    homes = [home / "a", home / "b"]
    daemons = []
    for h in homes:
        h.mkdir()
        daemons.append(start_serve(h, script=script, GEODE_STORE__URL=pg_url))
    try:
        async with await open_store(pg_url, migrate=False) as store:
            for _ in range(300):
                async with store.read() as conn:
                    rows = (await conn.execute(
                        select(timeline_table).where(timeline_table.c.kind
                                                     == "schedule.run_started")
                    )).all()
                if len(rows) >= 3:
                    break
                await asyncio.sleep(0.05)
    finally:
        codes = [sp.stop() for sp in daemons]
    assert codes == [0, 0], [sp.output() for sp in daemons]
    async with await open_store(pg_url, migrate=False) as store:
        async with store.read() as conn:
            rows = (await conn.execute(
                select(timeline_table).where(timeline_table.c.kind == "schedule.run_started")
            )).all()
            modes = {r.mode for r in (await conn.execute(select(sessions_table))).all()}
    dues = [r.payload["due"] for r in rows if r.payload["job_id"] == job.id]
    assert len(dues) >= 3
    assert len(dues) == len(set(dues)), f"a due time ran twice: {sorted(dues)}"
    print("claims by owner:", sorted(r.payload["owner"].rsplit(":", 1)[0] for r in rows))
    assert modes == {"SCHEDULER"}
