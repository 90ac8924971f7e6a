"""Scheduled jobs: the ``scheduled_jobs`` rows of ``geode schedule`` and the daemon's scheduler.

:class:`ScheduledJobStore` holds every SQL statement on the table; the scheduler
(:mod:`geode.daemon.scheduler`) reads cron expressions and computes due times, and asks this
store by name for a unit of work.

Claiming a run (no double run with several daemons on one PostgreSQL): each row holds
``next_run``, the due time of its next run. :meth:`ScheduledJobStore.claim` is::

    UPDATE scheduled_jobs SET next_run = :following, ... WHERE id = :id AND next_run = :due

and only the daemon whose UPDATE changed a row runs it; the others matched nothing, because
the winner already moved ``next_run``. The row *is* the lease, and the database's row lock
makes the compare-and-set atomic on both PostgreSQL and SQLite. The claim that starts a run
also takes the job's run lease (``running_by``, ``running_until``); a due time that comes
while the lease holds is claimed as skipped (:data:`SKIPPED`), not run.

Reminders are jobs bound to a chat thread (``thread``: the channel layer's thread key;
``target``: what the layer needs to fire one, JSON the harness does not read). The daemon's
scheduler runs only the jobs without a thread; the layer serving a thread claims its
reminders (:meth:`ScheduledJobStore.due` with ``threads``). A one-time job (``once``, no
cron) keeps its ``next_run``: :meth:`ScheduledJobStore.claim_once` takes only the run
lease, and :meth:`ScheduledJobStore.finish` disables it once it ran. A daemon that dies
between the claim and the finish leaves the job enabled, so it fires again after the lease
ran out (the layer's dedupe key makes that second firing a duplicate, recorded once).

Waking the schedulers of this process: a scheduler sleeps until its next due time, so a job
added or removed by this process would not be seen until it wakes. :meth:`ScheduledJobStore.watch`
registers a scheduler's wake-up with the database object; :meth:`~ScheduledJobStore.insert` wakes
the schedulers whose scope holds the new job, :meth:`~ScheduledJobStore.remove` wakes them all.
Another process's changes are not signalled: its schedulers see them at their next wake (their
``idle_s`` bounds the sleep).
"""

from __future__ import annotations

import builtins
import json
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import delete, or_, select, update

from geode.store.models import jobs_table, utcnow

if TYPE_CHECKING:
    from geode.store.database import Database

__all__ = ["SKIPPED", "Job", "JobClaim", "ScheduledJobStore"]

_J = jobs_table

#: ``last_status`` of a due time claimed while the previous run still held the lease
SKIPPED = "skipped: still running"
#: what a claim got: "run" (start it, the lease is ours), "overlap" (due, but the previous
#: run holds the lease: recorded as skipped); None when another daemon claimed the due time
JobClaim = Literal["run", "overlap"]


@dataclass(frozen=True, kw_only=True)
class Job:
    """One scheduled prompt, as its row holds it."""

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
    #: IANA time zone the cron is evaluated in; None = UTC
    tz: str | None = None
    #: a reminder's thread key (None: a ``geode schedule`` job)
    thread: str | None = None
    #: what the channel layer needs to fire a reminder (opaque here)
    target: dict[str, Any] | None = None
    #: who created it (a platform user id), if someone in a thread did
    created_by: str | None = None
    #: a one-time job: ``next_run`` is its time, ``cron`` is empty
    once: bool = False
    #: the run lease's end (Unix seconds) while a run holds it, else None
    running_until: int | None = None

    @property
    def ready_at(self) -> int:
        """When a claim can succeed: the due time, or for a one-time job whose run lease
        holds past it, the lease's end (a cron job's due time is claimed, as skipped, even
        while a run holds the lease)."""
        if self.once and self.running_until is not None:
            return max(self.next_run, self.running_until)
        return self.next_run

    @classmethod
    def from_row(cls, r: Any) -> Job:
        return cls(
            id=r.id, cron=r.cron, prompt=r.prompt, session_id=r.session_id, model=r.model,
            enabled=bool(r.enabled), next_run=int(r.next_run),
            last_run=None if r.last_run is None else int(r.last_run),
            last_status=r.last_status or "", last_session_id=r.last_session_id,
            run_count=int(r.run_count or 0), tz=r.tz, thread=r.thread,
            target=json.loads(r.target) if r.target else None, created_by=r.created_by,
            once=bool(r.once),
            running_until=None if r.running_until is None else int(r.running_until),
        )


Wake = Callable[[], None]
#: per database object: (scope, wake-up) of the schedulers sleeping on it (see the module
#: docstring); weak, so a closed and dropped database takes its entries with it
_watchers: weakref.WeakKeyDictionary[Database, list[tuple[str | None, Wake]]] = (
    weakref.WeakKeyDictionary())


def _in_scope(thread: str | None, scope: str | None) -> bool:
    return thread is None if scope is None else (thread or "").startswith(scope)


class ScheduledJobStore:
    """The ``scheduled_jobs`` table, built from the database like every record store."""

    def __init__(self, *, store: Database) -> None:
        self._store = store

    def watch(self, wake: Wake, *, threads: str | None = None) -> Callable[[], None]:
        """Call ``wake`` when this process adds a job in the scope ``threads`` (as for
        :meth:`due`) or removes any; returns what stops it."""
        entry = (threads, wake)
        _watchers.setdefault(self._store, []).append(entry)

        def unwatch() -> None:
            with_it = _watchers.get(self._store, [])
            if entry in with_it:
                with_it.remove(entry)
        return unwatch

    def _changed(self, thread: str | None, *, any_scope: bool = False) -> None:
        for scope, wake in list(_watchers.get(self._store, ())):
            if any_scope or _in_scope(thread, scope):
                wake()

    async def insert(self, job: Job) -> None:
        """Add ``job`` (its cron already checked, ``next_run`` its first due time)."""
        async with self._store.write() as conn:
            await conn.execute(
                _J.insert().values(
                    id=job.id, cron=job.cron, prompt=job.prompt, session_id=job.session_id,
                    model=job.model, enabled=job.enabled, next_run=job.next_run,
                    last_run=job.last_run, last_status=job.last_status,
                    last_session_id=job.last_session_id, claimed_by="",
                    run_count=job.run_count, tz=job.tz, created_at=utcnow(),
                    thread=job.thread, created_by=job.created_by, once=job.once,
                    target=None if job.target is None else json.dumps(job.target),
                )
            )
        self._changed(job.thread)

    async def get(self, job_id: str) -> Job | None:
        async with self._store.read() as conn:
            row = (await conn.execute(select(_J).where(_J.c.id == job_id))).first()
        return None if row is None else Job.from_row(row)

    async def list(self, *, thread: str | None = None) -> builtins.list[Job]:
        """Every job, oldest first; with ``thread``, that thread's enabled reminders."""
        stmt = select(_J).order_by(_J.c.created_at, _J.c.id)
        if thread is not None:
            stmt = stmt.where(_J.c.thread == thread, _J.c.enabled.is_(True))
        async with self._store.read() as conn:
            rows = (await conn.execute(stmt)).all()
        return [Job.from_row(r) for r in rows]

    async def remove(self, job_id: str) -> bool:
        """Delete a job; False when there was none."""
        async with self._store.write() as conn:
            result = await conn.execute(delete(_J).where(_J.c.id == job_id))
        self._changed(None, any_scope=True)
        return bool(result.rowcount)

    async def due(self, now: int, *, threads: str | None = None) -> builtins.list[Job]:
        """The enabled jobs whose due time is ``now`` (Unix seconds) or earlier, soonest first:
        the jobs without a thread, or with ``threads`` the reminders of the threads whose key
        starts with it (one bot's)."""
        scope = (_J.c.thread.is_(None) if threads is None
                 else _J.c.thread.startswith(threads, autoescape=True))
        async with self._store.read() as conn:
            rows = (
                await conn.execute(
                    select(_J)
                    .where(_J.c.enabled.is_(True), _J.c.next_run <= now, scope)
                    .order_by(_J.c.next_run)
                )
            ).all()
        return [Job.from_row(r) for r in rows]

    async def claim(
        self, job: Job, *, following: int, now: int, owner: str, lease_until: int
    ) -> JobClaim | None:
        """Compare-and-set ``next_run`` from ``job.next_run`` to ``following``: exactly one
        daemon gets each due time (see the module docstring). The one that gets ``"run"``
        holds the run lease until ``lease_until``; while another run holds it, the due time
        is claimed as skipped (``"overlap"``)."""
        this_due = (_J.c.id == job.id, _J.c.next_run == job.next_run, _J.c.enabled.is_(True))
        async with self._store.write() as conn:
            result = await conn.execute(
                update(_J)
                .where(*this_due, or_(_J.c.running_until.is_(None), _J.c.running_until <= now))
                .values(next_run=following, last_run=now, claimed_by=owner,
                        run_count=_J.c.run_count + 1, running_by=owner,
                        running_until=lease_until)
            )
            if result.rowcount == 1:
                return "run"
            result = await conn.execute(
                update(_J).where(*this_due).values(next_run=following, last_status=SKIPPED)
            )
        return "overlap" if result.rowcount == 1 else None

    async def claim_once(self, job: Job, *, now: int, owner: str, lease_until: int) -> bool:
        """A one-time job: take its run lease if it is free (``next_run`` stays; the finish
        disables the job). Exactly one daemon gets it while the lease holds."""
        async with self._store.write() as conn:
            result = await conn.execute(
                update(_J)
                .where(_J.c.id == job.id, _J.c.next_run == job.next_run,
                       _J.c.enabled.is_(True),
                       or_(_J.c.running_until.is_(None), _J.c.running_until <= now))
                .values(last_run=now, claimed_by=owner, run_count=_J.c.run_count + 1,
                        running_by=owner, running_until=lease_until)
            )
        return result.rowcount == 1

    async def renew(self, job_id: str, *, owner: str, lease_until: int) -> bool:
        """Extend ``owner``'s run lease; False if it is not ``owner``'s any more."""
        async with self._store.write() as conn:
            result = await conn.execute(
                update(_J).where(_J.c.id == job_id, _J.c.running_by == owner)
                .values(running_until=lease_until)
            )
        return result.rowcount == 1

    async def finish(
        self, job_id: str, *, status: str, session_id: str | None, owner: str | None = None,
        disable: bool = False,
    ) -> None:
        """Record a run's outcome; with ``owner``, release that owner's run lease; with
        ``disable``, the job runs no more (a one-time job that fired)."""
        values: dict[str, Any] = {"last_status": status[:32], "last_session_id": session_id}
        if disable:
            values["enabled"] = False
        async with self._store.write() as conn:
            await conn.execute(update(_J).where(_J.c.id == job_id).values(**values))
            if owner is not None:
                await conn.execute(
                    update(_J).where(_J.c.id == job_id, _J.c.running_by == owner)
                    .values(running_by=None, running_until=None)
                )
