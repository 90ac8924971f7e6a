"""Reminders: ``/remind WHEN WHAT``, ``/reminders [cancel ID]``, the ``schedule`` tool's book,
and the firing of reminders into their threads.

A reminder is a durable scheduled job bound to a thread (a ``scheduled_jobs`` row with the
thread's key, :class:`geode.daemon.scheduler.JobStore`), once or on a cron. When it is due,
the layer serving the thread claims it (the row's compare-and-set and run lease: with two
replicas exactly one claims a due time) and records a message in the thread as if its
creator had written ``WHAT`` to the bot: an inbound event with the dedupe key
``reminder:ID:DUE``. From there it is a mention like any other — the binding, the sender
policy (the creator must still be allowed), the caps, the lanes, one answer through the
outbox — and the dedupe key makes a second firing of the same due time (a replica that died
between the record and the claim's finish) a duplicate, recorded once.

A reminder missed while every replica was down fires once, at the next start (a cron one
then continues from now; the backlog of missed times is not replayed).

Times are read in the binding's time zone (its ``timezone`` key, an IANA name; UTC when
unset), and the zone is stored with the reminder: a cron reminder fires at its local time
across daylight-saving changes (``0 9 * * *`` in Europe/Berlin is 08:00 UTC in winter, 07:00
in summer), and ``/reminders`` shows each at its local time with the zone's name.
"""

from __future__ import annotations

import itertools
import re
import time
import zoneinfo
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from bots.events import InboundEvent
from geode.daemon.scheduler import JobStore, Scheduler, next_after, validate_cron, validate_tz
from geode.errors import ConfigError
from geode.secret_redaction import redact_text
from geode.store.jobs import Job
from geode.tools.errors import ToolFailure

if TYPE_CHECKING:
    from geode.daemon.supervisor import Component
    from geode.settings import BindingSettings
    from geode.store.database import Database

__all__ = ["MAX_PER_THREAD", "MIN_CRON_INTERVAL_S", "ReminderError", "ThreadReminders",
           "When", "parse_when", "usage"]

log = structlog.get_logger(__name__)

#: reminders one thread may hold at once
MAX_PER_THREAD = 10
#: the shortest interval a cron reminder may fire at
MIN_CRON_INTERVAL_S = 300
#: how far ahead a one-time reminder may be set
MAX_AHEAD_S = 366 * 86400

USAGE = ("Use /remind WHEN WHAT, WHEN one of: in 10m | in 2h | in 1d | tomorrow 09:00 | "
         "tomorrow 8am | at 9:00 | 2026-12-24T18:00 (ISO) | every day 09:00 | "
         'every weekday 09:00 | cron "0 9 * * 1-5". Times are UTC.')


def usage(tz: str | None = None) -> str:
    """The forms of WHEN, and the zone times are read in."""
    return USAGE if tz is None else USAGE.replace("Times are UTC.", f"Times are {tz}.")

Submit = Callable[[Sequence[tuple[InboundEvent, str]]], Awaitable[list[int]]]


class RunningTurn(Protocol):
    """What the book reads of a running turn (``bots.commands.ActiveTurn``)."""

    @property
    def session_id(self) -> str: ...

    @property
    def event_id(self) -> int: ...


class Bindings(Protocol):
    """Where the book reads a thread's binding (its time zone): ``bots.bindings``."""

    async def lookup(self, platform: str, workspace: str,
                     channel: str) -> BindingSettings | None: ...


class ReminderError(ValueError):
    """A reminder that cannot be made (its message says why and what works)."""


@dataclass(frozen=True, kw_only=True)
class When:
    """When a reminder fires: once ``at`` (Unix seconds) or on ``cron``, read in ``tz`` (an
    IANA name; None: UTC), which is also the zone the reminder is shown in."""

    at: int | None = None
    cron: str | None = None
    tz: str | None = None


_UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
          "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
          "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
          "d": 86400, "day": 86400, "days": 86400}
_IN = re.compile(r"in\s+(\d{1,6})\s*([a-z]+)(?:\s+(.*))?", re.IGNORECASE | re.DOTALL)
#: a time of day: 09:00, 9:00, 8am, 8:30 pm (hour, minute, am/pm; a bare hour is refused)
_CLOCK = r"(\d{1,2})(?::(\d{2}))?\s*(am|pm)?"
_DAY_AT = re.compile(rf"(?:(today|tomorrow)\s+(?:at\s+)?|at\s+){_CLOCK}(?:\s+(.*))?",
                     re.IGNORECASE | re.DOTALL)
_EVERY = re.compile(rf"every\s+(day|weekday)\s+(?:at\s+)?{_CLOCK}(?:\s+(.*))?",
                    re.IGNORECASE | re.DOTALL)
_CRON_QUOTED = re.compile(r'cron\s+"([^"]+)"\s+(.+)', re.IGNORECASE | re.DOTALL)
_CRON_BARE = re.compile(r"cron\s+((?:\S+\s+){4}\S+)\s+(.+)", re.IGNORECASE | re.DOTALL)


def parse_when(args: str, *, now: float, tz: str | None = None) -> tuple[When, str]:
    """``WHEN WHAT`` -> (when, what), times of day and dates read in ``tz`` (an IANA name;
    None: UTC). Raises :class:`ReminderError` with the forms that work."""
    args = args.strip()
    tz = validate_tz(tz)
    when, what = _parse(args, now, tz)
    what = what.strip()
    if not what:
        raise ReminderError(f"What should I do then? {usage(tz)}")
    if what.startswith("/"):
        raise ReminderError("A reminder runs a message for me, not a command: write what I "
                            "should do (e.g. /remind in 1h check the deploy).")
    if when.at is not None:
        if when.at <= now:
            raise ReminderError(f"That time has passed (times are {tz or 'UTC'}).")
        if when.at - now > MAX_AHEAD_S:
            raise ReminderError("That is more than a year ahead; pick a nearer time.")
    if when.cron is not None:
        _check_interval(when.cron, now, tz)
    return when, what


def _parse(args: str, now: float, tz: str | None) -> tuple[When, str]:
    zone = UTC if tz is None else zoneinfo.ZoneInfo(tz)
    if m := _IN.fullmatch(args):
        unit = _UNITS.get(m.group(2).lower())
        if unit is None:
            raise ReminderError(f"Unknown unit {m.group(2)[:12]!r}. {usage(tz)}")
        return When(at=int(now) + int(m.group(1)) * unit, tz=tz), m.group(3) or ""
    if m := _DAY_AT.fullmatch(args):
        day = datetime.fromtimestamp(now, zone).date()
        hour, minute = _clock(*m.group(2, 3, 4))
        if (m.group(1) or "").lower() == "tomorrow":
            day += timedelta(days=1)
        at = datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)
        if not m.group(1) and at.timestamp() <= now:  # "at 9:00" once 9:00 passed: tomorrow
            day += timedelta(days=1)
            at = datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)
        return When(at=int(at.timestamp()), tz=tz), m.group(5) or ""
    if m := _EVERY.fullmatch(args):
        hour, minute = _clock(*m.group(2, 3, 4))
        days = "*" if m.group(1).lower() == "day" else "1-5"
        return When(cron=f"{minute} {hour} * * {days}", tz=tz), m.group(5) or ""
    if m := _CRON_QUOTED.fullmatch(args) or _CRON_BARE.fullmatch(args):
        try:
            expr = validate_cron(m.group(1))
        except ConfigError as exc:
            raise ReminderError(str(exc)) from None
        if len(expr.split()) != 5:
            raise ReminderError("A reminder's cron has five fields: MIN HOUR DOM MON DOW.")
        return When(cron=expr, tz=tz), m.group(2)
    parts = args.split(maxsplit=2)
    for take in (2, 1):  # "2026-12-24 18:00 WHAT" or "2026-12-24T18:00 WHAT"
        if len(parts) <= take:
            continue
        try:
            at = datetime.fromisoformat(" ".join(parts[:take]))
        except ValueError:
            continue
        at = at if at.tzinfo is not None else at.replace(tzinfo=zone)
        return When(at=int(at.timestamp()), tz=tz), " ".join(parts[take:])
    raise ReminderError(f"I do not understand when. {usage(tz)}")


def _clock(hour: str, minute: str | None, half: str | None) -> tuple[int, int]:
    """(hour, minute) of ``9:00``, ``21:15``, ``8am``, ``8:30 pm``; a bare ``9`` is refused
    (nine in the morning or in the evening?)."""
    shown = f"{hour}{':' + minute if minute else ''}{' ' + half if half else ''}"
    if minute is None and half is None:
        raise ReminderError(f"At {hour} what? Say {hour}:00, {hour}am or {hour}pm.")
    h, m = int(hour), int(minute or 0)
    if half is not None:
        if not 1 <= h <= 12 or m > 59:
            raise ReminderError(f"{shown} is not a time of day (1:00-12:59 am/pm).")
        h = h % 12 + (12 if half.lower() == "pm" else 0)
    if h > 23 or m > 59:
        raise ReminderError(f"{shown} is not a time of day (00:00-23:59).")
    return h, m


def _check_interval(expr: str, now: float, tz: str | None) -> None:
    """Refuse a cron that fires more often than :data:`MIN_CRON_INTERVAL_S` (any two
    consecutive firings among its next few)."""
    times = [next_after(expr, now, tz)]
    for _ in range(12):
        times.append(next_after(expr, times[-1], tz))
    if min(b - a for a, b in itertools.pairwise(times)) < MIN_CRON_INTERVAL_S:
        raise ReminderError(f"That fires more often than every {MIN_CRON_INTERVAL_S // 60} "
                            "minutes; reminders may not.")


def _local(ts: int, tz: str | None) -> str:
    """``2026-12-24 18:00 Europe/Berlin`` (``... UTC`` without a zone)."""
    zone = UTC if tz is None else zoneinfo.ZoneInfo(tz)
    return f"{datetime.fromtimestamp(ts, zone):%Y-%m-%d %H:%M} {tz or 'UTC'}"


def describe(job: Job) -> str:
    """One line of ``/reminders``: id, when (its local time and zone), what (redacted, cut)."""
    when = (f"at {_local(job.next_run, job.tz)}" if job.once
            else f"cron {job.cron!r} ({job.tz or 'UTC'}), next {_local(job.next_run, job.tz)}")
    what = redact_text(job.prompt).replace("\n", " ")
    return f"{job.id}  {when}  {what[:80]!r}"


class ThreadReminders:
    """The reminders of one layer's threads: made by ``/remind`` and the ``schedule`` tool,
    listed and cancelled by ``/reminders``, fired by :meth:`run` (see the module docstring)."""

    def __init__(self, *, database: Database, submit: Submit, owner: str,
                 active: Mapping[str, RunningTurn] | None = None,
                 events: Callable[[int], Awaitable[InboundEvent | None]] | None = None,
                 tick_s: float = 1.0, clock: Callable[[], float] = time.time,
                 bindings: Bindings | None = None) -> None:
        """``bindings``: where a thread's binding is read (its ``timezone``; None: UTC)."""
        self.jobs = JobStore(store=database)
        self._bindings = bindings
        self._database = database
        self._submit = submit
        self._owner = owner
        #: the running turns by thread, and how to read a turn's event: the ``schedule``
        #: tool finds the thread (and who asked) of the session calling it
        self._active: Mapping[str, RunningTurn] = {} if active is None else active
        self._events = events
        self.tick_s = tick_s
        self.clock = clock
        self.scheduler: Scheduler | None = None

    # -- making, listing, cancelling ------------------------------------------------------------

    async def create(self, event: InboundEvent, args: str, *, by: str = "/remind") -> Job:
        """A reminder in ``event``'s thread, created by its sender. Raises ReminderError."""
        now = self.clock()
        when, what = parse_when(args, now=now, tz=await self._zone(event))
        if len(await self.jobs.in_thread(event.thread_key)) >= MAX_PER_THREAD:
            raise ReminderError(f"This thread has {MAX_PER_THREAD} reminders already (the "
                                "most it may hold); cancel one with /reminders cancel ID.")
        target: dict[str, Any] = {
            "platform": event.platform, "workspace": event.workspace,
            "channel": event.channel, "thread_root": event.thread_root,
            "message_id": event.message_id, "sender_name": event.sender_name,
            "is_dm": event.is_dm, "extra": dict(event.extra), "by": by,
        }
        job = await self.jobs.add_reminder(what, thread=event.thread_key, target=target,
                                           created_by=event.sender, at=when.at,
                                           cron=when.cron, tz=when.tz, now=now)
        log.info("reminder.created", job_id=job.id, thread=event.thread_key, once=job.once)
        return job

    async def _zone(self, event: InboundEvent) -> str | None:
        """The time zone of ``event``'s binding (None: UTC)."""
        if self._bindings is None:
            return None
        binding = await self._bindings.lookup(event.platform, event.workspace, event.channel)
        return None if binding is None else binding.timezone

    async def remind(self, event: InboundEvent) -> str:
        """``/remind WHEN WHAT``: the answer to post."""
        parts = event.text.split(maxsplit=1)
        if len(parts) < 2:
            return usage(await self._zone(event))
        try:
            job = await self.create(event, parts[1])
        except ReminderError as exc:
            return str(exc)
        return f"⏰ Reminder {job.id} set: {_when_line(job)}. /reminders lists this thread's."

    async def reminders(self, event: InboundEvent, binding: BindingSettings) -> str:
        """``/reminders`` lists the thread's; ``/reminders cancel ID`` cancels one (its
        creator or one of the binding's approvers)."""
        parts = event.text.split()
        if len(parts) >= 2 and parts[1].lower() == "cancel":
            if len(parts) < 3:
                return "Which one? /reminders cancel ID (the ids are listed by /reminders)."
            return await self._cancel(event.thread_key, parts[2], who=event.sender,
                                      approvers=binding.approvers)
        jobs = await self.jobs.in_thread(event.thread_key)
        if not jobs:
            return "No reminders in this thread. /remind WHEN WHAT sets one."
        return "\n".join(["Reminders of this thread:", *map(describe, jobs)])

    async def _cancel(self, thread: str, job_id: str, *, who: str,
                      approvers: Sequence[str]) -> str:
        job = await self.jobs.get(job_id)
        if job is None or job.thread != thread or not job.enabled:
            shown = re.sub(r"[^\w-]", "?", job_id[:24])
            return f"No reminder {shown} in this thread (/reminders lists them)."
        if who != job.created_by and who not in approvers:
            return f"Only its creator or an approver of this channel may cancel {job.id}."
        await self.jobs.remove(job.id)
        log.info("reminder.cancelled", job_id=job.id, by=who)
        return f"Cancelled reminder {job.id}."

    # -- the schedule tool's book (geode.tools.builtin.schedule.ReminderBook) -------------------

    async def _turn_event(self, session_id: str) -> InboundEvent:
        for active in list(self._active.values()):
            if active.session_id == session_id and self._events is not None:
                event = await self._events(active.event_id)
                if event is not None:
                    return event
        raise ToolFailure("no thread here: reminders are made in a chat thread's turn")

    async def tool_create(self, session_id: str, when: str, text: str) -> str:
        event = await self._turn_event(session_id)
        try:
            job = await self.create(event, f"{when} {text}", by="schedule tool")
        except ReminderError as exc:
            raise ToolFailure(str(exc)) from None
        return f"reminder {job.id} set: {_when_line(job)}"

    async def tool_list(self, session_id: str) -> str:
        event = await self._turn_event(session_id)
        jobs = await self.jobs.in_thread(event.thread_key)
        return "\n".join(map(describe, jobs)) or "no reminders in this thread"

    async def tool_cancel(self, session_id: str, reminder_id: str) -> str:
        event = await self._turn_event(session_id)
        job = await self.jobs.get(reminder_id)
        if job is None or job.thread != event.thread_key or not job.enabled:
            raise ToolFailure(f"no reminder {reminder_id[:24]!r} in this thread")
        await self.jobs.remove(job.id)
        return f"cancelled reminder {job.id}"

    # -- firing --------------------------------------------------------------------------------

    async def fire(self, job: Job, due: int) -> tuple[str, str | None]:
        """Record the reminder's message in its thread (the scheduler claimed ``due``)."""
        t = job.target or {}
        event = InboundEvent(
            platform=str(t.get("platform", "")), workspace=str(t.get("workspace", "")),
            channel=str(t.get("channel", "")), thread_root=str(t.get("thread_root", "")),
            message_id=str(t.get("message_id", "")), sender=job.created_by or "",
            sender_name=str(t.get("sender_name", "")),
            dedupe_key=f"reminder:{job.id}:{due}", text=job.prompt, mentions_bot=True,
            is_dm=bool(t.get("is_dm")), date=int(self.clock()),
            extra=dict(t.get("extra") or {}),
        )
        await self._submit([(event, "received")])
        log.info("reminder.fired", job_id=job.id, due=due, thread=job.thread)
        return "fired", job.thread

    async def run(self, health: Component, *, threads: str) -> None:
        """Claim and fire the due reminders of the threads whose key starts with ``threads``
        (this bot's) when they are due: the scheduler sleeps until the next one, at most its
        ``idle_s`` (a reminder made in this process wakes it at once; see
        :mod:`geode.daemon.scheduler`, "Waking"); a store error is retried ``tick_s`` later."""
        scheduler = self.scheduler = Scheduler(
            jobs=JobStore(store=self._database, threads=threads), run_job=self.fire,
            owner=self._owner, tick_s=self.tick_s, clock=self.clock)
        try:
            await scheduler.run(health)
        finally:
            await scheduler.stop()
            await scheduler.wait_runs()


def _when_line(job: Job) -> str:
    if job.once:
        return f"once at {_local(job.next_run, job.tz)}"
    return f"cron {job.cron!r} ({job.tz or 'UTC'}), first at {_local(job.next_run, job.tz)}"
