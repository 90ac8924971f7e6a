"""Scheduled jobs: a prompt run by ``geode serve`` in SCHEDULER mode on a cron expression.

Cron expressions are parsed by croniter (never by hand): the usual five fields, or six
with croniter's seconds field last (``* * * * * */10`` = every 10 s). They are evaluated
in the job's IANA time zone (``tz``, e.g. ``Europe/Berlin``; UTC when unset), so
``0 9 * * 1-5`` stays 09:00 local across daylight-saving changes. Due times are stored as
Unix seconds either way.

The jobs are rows of the record store :class:`geode.store.jobs.ScheduledJobStore`, which holds
every SQL statement on them; :class:`JobStore` is what the scheduler and ``geode schedule``
use: it reads the cron expressions and computes the due times, and asks that store.

Claiming a run (no double run with several daemons on one PostgreSQL): each job row holds
``next_run``, the due time of its next run. A daemon that sees a due job compares and sets
it to the following due time (:meth:`ScheduledJobStore.claim`), and only the daemon whose
update changed the row runs it; the others matched nothing, because the winner already
moved ``next_run``. The row *is* the lease, and the database's row lock makes the
compare-and-set atomic on both PostgreSQL and SQLite.

Missed runs (policy: **run once, then continue**): after downtime a job whose ``next_run``
is in the past runs once, as soon as a daemon is up; ``:following`` is computed from *now*,
so the backlog of missed times is skipped rather than replayed.

Overlap (no second run while one goes on, in any daemon): the claim that starts a run also
takes the job's run lease (``running_by``, ``running_until``), renewed every third of
``lease_s`` while the run lasts and released when it ends. A due time that comes while the
lease holds is claimed as skipped (``last_status = "skipped: still running"``), not run. If
the daemon running the job dies, its lease runs out after at most ``lease_s`` (60 s) and
the next due time runs again.

Reminders (jobs bound to a chat thread, once or cron) are rows of the same table, claimed the
same way; a :class:`JobStore` scoped with ``threads`` sees only the reminders of those
threads (the channel layer runs one :class:`Scheduler` over it, firing each into its
thread), the daemon's unscoped one only the jobs without a thread. A one-time reminder keeps
its due time until it fired: its claim takes only the run lease, and the finish disables it.
A reminder missed while every daemon was down fires once, at the next start.

Waking (nothing to do costs nothing): :meth:`Scheduler.run` does not poll. Each pass reads,
in one query, the jobs due within ``idle_s`` (30 s by default), claims the due ones, and
sleeps until the earliest of the rest is due (a one-time job whose run lease holds: until the
lease ends), or ``idle_s`` when none is; after a pass that found something due it looks
again ``tick_s`` (1 s) later. A job this process adds or removes wakes it at once
(:meth:`geode.store.jobs.ScheduledJobStore.watch`), so does the end of one of its own runs; a
job another process adds (``geode schedule add``, another replica's ``/remind``) is seen at
the next wake, at most ``idle_s`` later. Idle, a scheduler costs one query per ``idle_s``.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import secrets
import time
import zoneinfo
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import structlog
from croniter import croniter

from geode.daemon.supervisor import describe_error
from geode.errors import ConfigError
from geode.secret_redaction import redact_text
from geode.store.jobs import SKIPPED, Job, JobClaim, ScheduledJobStore

if TYPE_CHECKING:
    from geode.store.database import Database

__all__ = [
    "Claim", "Job", "JobStore", "RunJob", "Scheduler", "next_after", "validate_cron",
    "validate_tz",
]

log = structlog.get_logger(__name__)

#: seconds a run lease holds without renewal (renewed every third of it)
RUN_LEASE_S = 60.0
#: the longest a scheduler sleeps with nothing due: 30 ticks, at most 30 s (the default
#: tick is 1 s). It bounds how late a job another process added is seen, and stays under
#: the supervisor's staleness bound for the scheduler, ``max(60 s, 30 ticks)``.
IDLE_TICKS = 30
IDLE_MAX_S = 30.0
#: what a claim got (:data:`geode.store.jobs.JobClaim`): "run" (start it, the lease is
#: ours), "overlap" (due, but the previous run holds the lease: recorded as skipped)
Claim = JobClaim


def validate_cron(expr: str) -> str:
    """Return ``expr`` normalised, or raise ConfigError saying what a valid one looks like."""
    expr = " ".join(expr.split())
    if len(expr.split()) not in (5, 6) or not croniter.is_valid(expr):
        raise ConfigError(
            f"invalid cron expression {expr!r}: use five fields 'MIN HOUR DOM MON DOW' "
            "(e.g. '0 9 * * 1-5'), or six with seconds last (e.g. '* * * * * */10'); "
            "times are UTC unless the job has a time zone"
        )
    return expr


def validate_tz(tz: str | None) -> str | None:
    """An IANA time zone name as given (None for UTC), or ConfigError saying what is valid."""
    if tz is None or tz in ("UTC", "Etc/UTC"):
        return None
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigError(
            f"unknown time zone {tz!r}: use an IANA name such as 'Europe/Berlin' or "
            "'America/New_York' (or leave it out for UTC)"
        ) from exc
    return tz


def next_after(expr: str, ts: float, tz: str | None = None) -> int:
    """The first due time strictly after ``ts`` (Unix seconds), the cron read in ``tz``."""
    if tz is None:
        return int(croniter(expr, float(ts)).get_next(float))
    start = datetime.fromtimestamp(ts, zoneinfo.ZoneInfo(tz))
    return int(croniter(expr, start).get_next(datetime).timestamp())


class JobStore:
    """The scheduled jobs as ``geode schedule add/list/remove`` and the Scheduler use them:
    cron expressions checked and due times computed here, the rows in
    :class:`~geode.store.jobs.ScheduledJobStore` (built from ``store``)."""

    def __init__(self, *, store: Database, threads: str | None = None) -> None:
        """``threads``: the reminders of the threads whose key starts with it (None: the
        jobs without a thread, as ``geode schedule add`` makes them)."""
        self._rows = ScheduledJobStore(store=store)
        self._threads = threads

    async def add_reminder(
        self,
        prompt: str,
        *,
        thread: str,
        target: dict[str, Any],
        created_by: str,
        at: float | None = None,
        cron: str | None = None,
        tz: str | None = None,
        now: float | None = None,
    ) -> Job:
        """A reminder bound to ``thread``: once at ``at`` (Unix seconds), or on ``cron``
        read in ``tz``. The caller checked the thread's bounds."""
        if (at is None) == (cron is None):
            raise ConfigError("a reminder is either once (at a time) or on a cron")
        if not prompt.strip():
            raise ConfigError("the reminder's text is empty")
        zone = validate_tz(tz)
        when = time.time() if now is None else now
        expr = "" if cron is None else validate_cron(cron)
        first = int(at) if at is not None else next_after(expr, when, zone)
        # at rest: no credential (the model's `schedule` call may carry a key a tool read;
        # a key said in the thread was masked before the command was read)
        job = Job(id=f"rem-{secrets.token_hex(4)}", cron=expr, prompt=redact_text(prompt),
                  next_run=first, tz=zone, thread=thread, target=target,
                  created_by=created_by, once=cron is None)
        await self._rows.insert(job)
        return job

    async def in_thread(self, thread: str) -> builtins.list[Job]:
        """The thread's enabled reminders, oldest first."""
        return await self._rows.list(thread=thread)

    async def add(
        self,
        cron: str,
        prompt: str,
        *,
        session_id: str | None = None,
        model: str | None = None,
        tz: str | None = None,
        now: float | None = None,
    ) -> Job:
        expr = validate_cron(cron)
        zone = validate_tz(tz)
        if not prompt.strip():
            raise ConfigError("the scheduled prompt is empty")
        job = Job(id=f"job-{secrets.token_hex(4)}", cron=expr, prompt=prompt,
                  session_id=session_id, model=model,
                  next_run=next_after(expr, time.time() if now is None else now, zone), tz=zone)
        await self._rows.insert(job)
        return job

    async def get(self, job_id: str) -> Job | None:
        return await self._rows.get(job_id)

    async def list(self) -> list[Job]:
        return await self._rows.list()

    async def remove(self, job_id: str) -> bool:
        return await self._rows.remove(job_id)

    async def due(self, now: float) -> builtins.list[Job]:
        """The enabled jobs of this scope due at ``now`` or earlier, soonest first."""
        return await self._rows.due(int(now), threads=self._threads)

    def watch(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Call ``wake`` when this process adds a job in this scope or removes one; returns
        what stops it."""
        return self._rows.watch(wake, threads=self._threads)

    async def claim(
        self, job: Job, *, now: float, owner: str, lease_s: float = RUN_LEASE_S
    ) -> Claim | None:
        """Compare-and-set ``next_run``: exactly one daemon gets each due time (see the
        module docstring); the one that gets ``"run"`` holds the run lease. The following
        due time counts from now: missed runs are skipped, not replayed. A one-time job
        keeps its due time (only the lease is taken; :meth:`finish` disables it)."""
        if job.once:
            won = await self._rows.claim_once(job, now=int(now), owner=owner,
                                              lease_until=_lease_end(now, lease_s))
            return "run" if won else None
        following = next_after(job.cron, max(now, job.next_run), job.tz)
        return await self._rows.claim(job, following=following, now=int(now), owner=owner,
                                      lease_until=_lease_end(now, lease_s))

    async def renew(self, job_id: str, *, owner: str, now: float, lease_s: float) -> bool:
        """Extend ``owner``'s run lease; False if it is not ``owner``'s any more."""
        return await self._rows.renew(job_id, owner=owner, lease_until=_lease_end(now, lease_s))

    async def finish(
        self, job_id: str, *, status: str, session_id: str | None, owner: str | None = None,
        disable: bool = False,
    ) -> None:
        """Record a run's outcome; with ``owner``, release that owner's run lease; with
        ``disable``, the job runs no more (a one-time job that fired)."""
        await self._rows.finish(job_id, status=status, session_id=session_id, owner=owner,
                                disable=disable)


def _lease_end(now: float, lease_s: float) -> int:
    return int(now + lease_s) + 1  # whole seconds, rounded up: never shorter than asked


#: runs one claimed job; returns (status, session id)
RunJob = Callable[[Job, int], Awaitable[tuple[str, str | None]]]


class Health(Protocol):
    """Where :meth:`Scheduler.run` reports (a supervisor's ``Component``)."""

    def beat(self, detail: str | None = None) -> None: ...

    def down(self, why: str) -> None: ...


class Scheduler:
    """Runs the due jobs this daemon claims, waking at their due times (see the module
    docstring: "Waking")."""

    def __init__(
        self,
        *,
        jobs: JobStore,
        run_job: RunJob,
        owner: str,
        tick_s: float = 1.0,
        idle_s: float | None = None,
        lease_s: float = RUN_LEASE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``tick_s``: the gap before the next pass after one that found something due, or
        failed; ``idle_s``: the longest sleep with nothing due (default ``IDLE_TICKS``
        ticks, at most ``IDLE_MAX_S``), the bound on seeing another process's new job."""
        self.jobs = jobs
        self.run_job = run_job
        self.owner = owner
        self.tick_s = tick_s
        self.idle_s = min(IDLE_TICKS * tick_s, IDLE_MAX_S) if idle_s is None else idle_s
        self.lease_s = lease_s
        self.clock = clock
        self._running: dict[str, asyncio.Task[None]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._wake = asyncio.Event()

    @property
    def running(self) -> int:
        return len(self._running)

    def wake(self) -> None:
        """Look for due jobs now (a job changed in this process)."""
        self._wake.set()

    async def start(self) -> None:
        self._loop_task = asyncio.create_task(self.run(), name="geode-scheduler")

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

    async def run(self, health: Health | None = None) -> None:
        """Pass after pass until cancelled or stopped; a store error is reported to
        ``health`` (and logged) and retried ``tick_s`` later, a good pass beats."""
        unwatch = self.jobs.watch(self.wake)
        try:
            while not self._stopping:
                try:
                    delay = await self.step()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # a store hiccup must not kill the scheduler
                    if health is not None:
                        health.down(f"tick failed: {describe_error(exc)}")
                    log.warning("scheduler.tick_failed", error_class=type(exc).__name__,
                                exc_info=exc)
                    delay = self.tick_s
                else:
                    if health is not None:
                        health.beat("ticking")
                await self._sleep(delay)
        finally:
            unwatch()

    async def _sleep(self, delay: float) -> None:
        """Sleep ``delay`` seconds, or less if :meth:`wake` is called."""
        if not self._wake.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
        self._wake.clear()

    async def step(self) -> float:
        """One pass: claim and start the due jobs (one query for them and the ones due
        within ``idle_s``); returns the seconds until the next pass."""
        now = self.clock()
        upcoming = await self.jobs.due(now + self.idle_s)
        ready = [j for j in upcoming if j.ready_at <= now]
        await self._start(ready, now)
        waits = [self.idle_s, *(j.ready_at - now for j in upcoming if j.ready_at > now)]
        if ready:  # a claimed cron job's next due time is read again, as is a failed one
            waits.append(self.tick_s)
        return max(0.0, min(waits))

    async def tick(self) -> list[str]:
        """Claim and start every due job; returns the ids started (tests)."""
        now = self.clock()
        return await self._start(await self.jobs.due(now), now)

    async def _start(self, due: builtins.list[Job], now: float) -> list[str]:
        started: list[str] = []
        for job in due:
            if self._stopping:
                break
            claim = await self.jobs.claim(job, now=now, owner=self.owner, lease_s=self.lease_s)
            if claim is None:
                continue  # another daemon claimed this due time
            if claim == "overlap":
                log.info("scheduler.skipped_overlap", job_id=job.id)
                continue
            if job.id in self._running:
                # Our own lease ran out while the run goes on (renewals failed): the claim
                # took it again, and the running run releases it when it ends.
                await self.jobs.finish(job.id, status=SKIPPED, session_id=job.last_session_id)
                log.info("scheduler.skipped_overlap", job_id=job.id)
                continue
            task = asyncio.create_task(self._run(job), name=f"geode-job-{job.id}")
            self._running[job.id] = task
            started.append(job.id)
        return started

    async def _run(self, job: Job) -> None:
        status, session_id = "error", None
        heartbeat = asyncio.create_task(self._renew(job.id), name=f"geode-job-lease-{job.id}")
        try:
            status, session_id = await self.run_job(job, job.next_run)
        except Exception as exc:
            log.error("scheduler.run_failed", job_id=job.id, error=str(exc)[:300])
            status = "error"
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            self._running.pop(job.id, None)
            with contextlib.suppress(Exception):
                # a one-time job that failed stays enabled: the next pass fires it again
                await self.jobs.finish(job.id, status=status, session_id=session_id,
                                       owner=self.owner,
                                       disable=job.once and status != "error")
            self.wake()  # the lease it held may have kept the next pass waiting

    async def _renew(self, job_id: str) -> None:
        """Keep this run's lease while it lasts (a store hiccup is retried next time)."""
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                if not await self.jobs.renew(job_id, owner=self.owner, now=self.clock(),
                                             lease_s=self.lease_s):
                    log.warning("scheduler.lease_lost", job_id=job_id)
            except Exception as exc:
                log.warning("scheduler.lease_renew_failed", job_id=job_id,
                            error=type(exc).__name__)
