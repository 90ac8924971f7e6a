"""Scheduled jobs: a prompt run by ``geode serve`` in SCHEDULER mode on a cron expression.

Cron expressions are parsed by croniter (never by hand): the usual five fields, or six
with croniter's seconds field last (``* * * * * */10`` = every 10 s). They are evaluated
in **UTC**.

Claiming a run (no double run with several daemons on one PostgreSQL): each job row holds
``next_run``, the due time of its next run. A daemon that sees a due job runs::

    UPDATE scheduled_jobs SET next_run = :following, ... WHERE id = :id AND next_run = :due

and only the daemon whose UPDATE changed a row runs it; the others matched nothing,
because the winner already moved ``next_run``. The row *is* the lease, and the database's
row lock makes the compare-and-set atomic on both PostgreSQL and SQLite.

Missed runs (policy: **run once, then continue**): after downtime a job whose ``next_run``
is in the past runs once, as soon as a daemon is up; ``:following`` is computed from *now*,
so the backlog of missed times is skipped rather than replayed.

Overlap: if a job is still running in this daemon when it is due again, the due time is
claimed and recorded as skipped (``last_status = "skipped: still running"``).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from croniter import croniter
from sqlalchemy import delete, select, update

from geode.daemon._tables import jobs_table
from geode.errors import ConfigError
from geode.store.models import utcnow

if TYPE_CHECKING:
    from geode.store import Store

__all__ = ["Job", "JobStore", "RunJob", "Scheduler", "next_after", "validate_cron"]

log = structlog.get_logger(__name__)
_J = jobs_table


@dataclass(frozen=True, kw_only=True)
class Job:
    id: str
    cron: str
    prompt: str
    session_id: str | None = None
    model: str | None = None
    enabled: bool = True
    next_run: int = 0
    last_run: int | None = None
    last_status: str = ""
    last_session_id: str | None = None
    run_count: int = 0

    @classmethod
    def from_row(cls, r: Any) -> Job:
        return cls(
            id=r.id, cron=r.cron, prompt=r.prompt, session_id=r.session_id, model=r.model,
            enabled=bool(r.enabled), next_run=int(r.next_run),
            last_run=None if r.last_run is None else int(r.last_run),
            last_status=r.last_status or "", last_session_id=r.last_session_id,
            run_count=int(r.run_count or 0),
        )


def validate_cron(expr: str) -> str:
    """Return ``expr`` normalised, or raise ConfigError saying what a valid one looks like."""
    expr = " ".join(expr.split())
    if len(expr.split()) not in (5, 6) or not croniter.is_valid(expr):
        raise ConfigError(
            f"invalid cron expression {expr!r}: use five fields 'MIN HOUR DOM MON DOW' "
            "(e.g. '0 9 * * 1-5'), or six with seconds last (e.g. '* * * * * */10'); "
            "times are UTC"
        )
    return expr


def next_after(expr: str, ts: float) -> int:
    """The first due time strictly after ``ts`` (Unix seconds, UTC)."""
    return int(croniter(expr, float(ts)).get_next(float))


class JobStore:
    """The ``scheduled_jobs`` rows (``geode schedule add/list/remove`` and the Scheduler)."""

    def __init__(self, *, store: Store) -> None:
        self._store = store

    async def add(
        self,
        cron: str,
        prompt: str,
        *,
        session_id: str | None = None,
        model: str | None = None,
        now: float | None = None,
    ) -> Job:
        expr = validate_cron(cron)
        if not prompt.strip():
            raise ConfigError("the scheduled prompt is empty")
        job_id = f"job-{secrets.token_hex(4)}"
        first = next_after(expr, time.time() if now is None else now)
        async with self._store.write() as conn:
            await conn.execute(
                _J.insert().values(
                    id=job_id, cron=expr, prompt=prompt, session_id=session_id, model=model,
                    enabled=True, next_run=first, last_run=None, last_status="",
                    last_session_id=None, claimed_by="", run_count=0, created_at=utcnow(),
                )
            )
        return Job(id=job_id, cron=expr, prompt=prompt, session_id=session_id, model=model,
                   next_run=first)

    async def get(self, job_id: str) -> Job | None:
        async with self._store.read() as conn:
            row = (await conn.execute(select(_J).where(_J.c.id == job_id))).first()
        return None if row is None else Job.from_row(row)

    async def list(self) -> list[Job]:
        async with self._store.read() as conn:
            rows = (await conn.execute(select(_J).order_by(_J.c.created_at, _J.c.id))).all()
        return [Job.from_row(r) for r in rows]

    async def remove(self, job_id: str) -> bool:
        async with self._store.write() as conn:
            result = await conn.execute(delete(_J).where(_J.c.id == job_id))
        return bool(result.rowcount)

    async def due(self, now: float) -> builtins.list[Job]:
        async with self._store.read() as conn:
            rows = (
                await conn.execute(
                    select(_J)
                    .where(_J.c.enabled.is_(True), _J.c.next_run <= int(now))
                    .order_by(_J.c.next_run)
                )
            ).all()
        return [Job.from_row(r) for r in rows]

    async def claim(self, job: Job, *, now: float, owner: str) -> bool:
        """Compare-and-set ``next_run``: True for exactly one daemon per due time."""
        following = next_after(job.cron, max(now, job.next_run))
        async with self._store.write() as conn:
            result = await conn.execute(
                update(_J)
                .where(_J.c.id == job.id, _J.c.next_run == job.next_run,
                       _J.c.enabled.is_(True))
                .values(next_run=following, last_run=int(now), claimed_by=owner,
                        run_count=_J.c.run_count + 1)
            )
        return result.rowcount == 1

    async def finish(self, job_id: str, *, status: str, session_id: str | None) -> None:
        async with self._store.write() as conn:
            await conn.execute(
                update(_J).where(_J.c.id == job_id)
                .values(last_status=status[:32], last_session_id=session_id)
            )


#: runs one claimed job; returns (status, session id)
RunJob = Callable[[Job, int], Awaitable[tuple[str, str | None]]]


class Scheduler:
    """Polls for due jobs every ``tick_s`` and runs the ones this daemon claims."""

    def __init__(
        self,
        *,
        jobs: JobStore,
        run_job: RunJob,
        owner: str,
        tick_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.jobs = jobs
        self.run_job = run_job
        self.owner = owner
        self.tick_s = tick_s
        self.clock = clock
        self._running: dict[str, asyncio.Task[None]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def running(self) -> int:
        return len(self._running)

    async def start(self) -> None:
        self._loop_task = asyncio.create_task(self._loop(), name="geode-scheduler")

    async def stop(self) -> None:
        """Stop claiming new runs; runs already started go on (the daemon drains them)."""
        self._stopping = True
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None

    async def wait_runs(self) -> None:
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a store hiccup must not kill the scheduler
                log.warning("scheduler.tick_failed", error=type(exc).__name__,
                            detail=str(exc)[:200])
            await asyncio.sleep(self.tick_s)

    async def tick(self) -> list[str]:
        """Claim and start every due job; returns the ids started (tests)."""
        now = self.clock()
        started: list[str] = []
        for job in await self.jobs.due(now):
            if self._stopping:
                break
            if not await self.jobs.claim(job, now=now, owner=self.owner):
                continue  # another daemon claimed this due time
            if job.id in self._running:
                await self.jobs.finish(job.id, status="skipped: still running",
                                       session_id=job.last_session_id)
                log.info("scheduler.skipped_overlap", job_id=job.id)
                continue
            task = asyncio.create_task(self._run(job), name=f"geode-job-{job.id}")
            self._running[job.id] = task
            started.append(job.id)
        return started

    async def _run(self, job: Job) -> None:
        status, session_id = "error", None
        try:
            status, session_id = await self.run_job(job, job.next_run)
        except Exception as exc:
            log.error("scheduler.run_failed", job_id=job.id, error=str(exc)[:300])
            status = "error"
        finally:
            self._running.pop(job.id, None)
            with contextlib.suppress(Exception):
                await self.jobs.finish(job.id, status=status, session_id=session_id)
