"""Spend control: the caps of ``[budgets]`` (daemon-wide) and of each ``[[bindings]]``,
checked before every model call against the usage ledger (``geode.store.usage``).

:class:`SpendControl` is the loop's :class:`~geode.loop.SpendGate` for one session, built by
the session factory with who the session spends for (:class:`SpendIdentity`). What each cap
counts:

- ``max_tokens_per_day`` / ``max_usd_per_day``: every call of the day ([budgets]: the whole
  store, so every replica and entry point; a binding's: that binding's calls);
- ``max_tokens_per_thread``: every call ever made in the thread (``/new`` does not reset it);
- ``max_tokens_per_user_per_day``: the platform user's calls of the day;
- ``max_usd_per_turn``: the running turn's cost (kept across a resume).

Days start at midnight in ``[budgets] timezone`` (UTC by default). Tokens are input +
output as the provider reported them; USD needs ``[model.prices]`` (the factory refuses a
USD cap for an unpriced model).

Calls in flight count. Before each call the most it can spend (its input, estimated at 4
characters a token, + its ``max_tokens`` of output, and that at the model's price) is
reserved in the store, in one serialised transaction with the check (shared by threads,
restarts and every replica on one PostgreSQL); after the call the reservation becomes the
provider's real figure. A call starts only when, for every cap, the settled usage is below
the limit and either the settled usage + every reservation in flight + its own maximum fits
under the limit, or no other call is in flight for that cap (then it waits for none: it is
the one call allowed to cross). Otherwise it waits for the calls in flight to settle and
asks again. So a cap is exceeded by at most ONE call (the last one started below it), never
by the calls of parallel threads or replicas together; when the input estimate is below
the provider's count, by that difference too. A process that dies mid-call leaves its
reservation, settled at its full size by the next check (same host: at once, the pid is
gone; another replica's: when it expires, ``reservation_ttl_s``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import structlog

from geode.hooks.events import SpendCapReached, UsageRecorded
from geode.loop.compaction import estimate_tokens
from geode.loop.protocols import Observer, SpendRefusal, TurnInfo
from geode.messages import Usage
from geode.settings import BudgetSettings, SpendCaps
from geode.store.timeline import SessionTimeline
from geode.store.usage import (
    CapLimit,
    CapReached,
    InFlight,
    UsageFilter,
    UsageLedger,
    UsageRecord,
    UsageTotals,
)

if TYPE_CHECKING:
    from geode.providers.base import ModelRequest

__all__ = [
    "RESERVATION_TTL_S",
    "SpendControl",
    "SpendIdentity",
    "day_window",
    "estimate_call",
    "holder_alive",
    "process_holder",
    "usage_status_lines",
]

log = structlog.get_logger(__name__)

Clock = Callable[[], float]

#: a reservation nobody settles (its replica died on another host) counts at its full size
#: and is settled so after this long; a call running longer than this stops being held
RESERVATION_TTL_S = 900.0
#: waiting for calls in flight to settle: first pause, doubling up to the last
_WAIT_FIRST_S = 0.05
_WAIT_MAX_S = 1.0


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22):
    with the pid it names one process, not whoever gets the pid next. None: no such process;
    "" where /proc is not there (the pid alone then)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if not Path("/proc/self/stat").exists():
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return None
            except PermissionError:
                return ""
            return ""
        return None
    except OSError:
        return None
    return raw.rsplit(")", 1)[1].split()[19]


@functools.cache
def process_holder() -> str:
    """This process, as reservations name their holder: ``host:pid:start``."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid) or ''}"


def holder_alive(holder: str) -> bool:
    """Whether the process ``holder`` names may still run: False only for one on this host
    whose pid is gone (or is another process now). Another host's: True (its reservations
    expire instead)."""
    host, _, rest = holder.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    ticks = _start_ticks(int(pid_text))
    return ticks is not None and (not start or not ticks or ticks == start)


def estimate_call(request: ModelRequest | None,
                  price_per_mtok: tuple[float, float] | None) -> UsageRecord:
    """The most one call can spend: its input (estimated: 4 characters a token, images
    flat; the tools' schemas included) + its ``max_tokens`` of output, and the cost of that
    at ``price_per_mtok`` (None without a price). No request: nothing."""
    if request is None:
        return UsageRecord(session_id="")
    tools = sum(len(t.name) + len(t.description) + len(json.dumps(t.input_schema))
                for t in request.tools)
    inp = estimate_tokens(request.messages, request.system) + tools // 4
    out = request.max_tokens
    cost = None if price_per_mtok is None else (
        (inp * price_per_mtok[0] + out * price_per_mtok[1]) / 1_000_000)
    return UsageRecord(session_id="", input_tokens=inp, output_tokens=out, cost_usd=cost)


@dataclass(frozen=True, kw_only=True)
class SpendIdentity:
    """Who a session's model calls count against."""

    session_id: str
    #: ``platform:channel`` of the channel binding; "" outside channels
    binding: str = ""
    platform: str = ""
    #: the platform user the turn answers; "" when none
    user: str = ""
    #: the conversation for per-thread caps; the session when empty
    thread: str = ""


@dataclass(frozen=True)
class _Cap:
    name: str
    scope: str
    limit: float
    #: rows it sums; None for the per-turn cap (the turn's own cost)
    counts: UsageFilter | None
    usd: bool
    #: "day", "thread" or "turn": when it resets
    period: str


def day_window(now: float, tz: str) -> tuple[int, datetime]:
    """(start of ``now``'s day in Unix ms, the next midnight) in time zone ``tz``."""
    zone = ZoneInfo(tz)
    local = datetime.fromtimestamp(now, zone)
    start = datetime(local.year, local.month, local.day, tzinfo=zone)
    nxt = start.date() + timedelta(days=1)
    return int(start.timestamp() * 1000), datetime(nxt.year, nxt.month, nxt.day, tzinfo=zone)


def _amount(value: float, usd: bool) -> str:
    return f"${value:,.4f}" if usd else f"{int(value):,} tokens"


class SpendControl:
    """The spend caps of one session (implements :class:`~geode.loop.SpendGate`)."""

    def __init__(
        self,
        *,
        ledger: UsageLedger,
        identity: SpendIdentity,
        budgets: BudgetSettings,
        binding_caps: SpendCaps | None = None,
        clock: Clock = time.time,
        timeline: SessionTimeline | None = None,
        observer: Observer | None = None,
        reservation_ttl_s: float = RESERVATION_TTL_S,
    ) -> None:
        self.ledger = ledger
        self.identity = identity
        self.budgets = budgets
        self.binding_caps = binding_caps
        self.clock = clock
        self.timeline = timeline
        self.observer = observer
        self.reservation_ttl_s = reservation_ttl_s
        #: the reservation of the call this session has in flight (one at a time)
        self._held: str | None = None

    def _caps(self, day_start_ms: int) -> list[_Cap]:
        ident = self.identity
        thread = ident.thread or ident.session_id
        scopes: list[tuple[str, SpendCaps, str | None]] = [("daemon", self.budgets, None)]
        if self.binding_caps is not None and ident.binding:
            scopes.append((f"binding {ident.binding}", self.binding_caps, ident.binding))
        out: list[_Cap] = []
        for scope, caps, binding in scopes:
            for name, limit in caps.caps().items():
                if name == "max_usd_per_turn":
                    out.append(_Cap(name, scope, limit, None, True, "turn"))
                elif name == "max_tokens_per_thread":
                    out.append(_Cap(name, scope, limit, UsageFilter(thread=thread), False,
                                    "thread"))
                elif name == "max_tokens_per_user_per_day":
                    if ident.user:  # no user, nothing this cap can count
                        out.append(_Cap(name, f"{scope}, user {ident.user}", limit, UsageFilter(
                            since_ms=day_start_ms, binding=binding, platform=ident.platform,
                            user=ident.user), False, "day"))
                else:
                    out.append(_Cap(name, scope, limit, UsageFilter(
                        since_ms=day_start_ms, binding=binding), name.startswith("max_usd"),
                        "day"))
        return out

    async def check(
        self, *, turn: TurnInfo, turn_cost_usd: float, request: ModelRequest | None = None,
        price_per_mtok: tuple[float, float] | None = None,
    ) -> SpendRefusal | None:
        if self._held is not None:  # a call that never came back (cancelled): count it
            await self.release(turn=turn, spent=True)
        now = self.clock()
        day_start, next_day = day_window(now, self.budgets.timezone)
        caps = self._caps(day_start)
        if not caps:
            return None
        for cap in caps:
            if cap.counts is None and turn_cost_usd >= cap.limit:
                return await self._refuse(turn, cap, turn_cost_usd, next_day)
        summed = [c for c in caps if c.counts is not None]
        if not summed:
            return None
        limits = [CapLimit(counts=c.counts, limit=c.limit, usd=c.usd)
                  for c in summed if c.counts is not None]
        estimate = self._own(turn, estimate_call(request, price_per_mtok),
                             model=request.model if request is not None else "")
        pause = _WAIT_FIRST_S
        waited = False
        while True:
            outcome = await self.ledger.reserve(
                estimate, limits, holder=process_holder(), now_ms=int(self.clock() * 1000),
                ttl_ms=int(self.reservation_ttl_s * 1000), alive=holder_alive)
            if isinstance(outcome, CapReached):
                return await self._refuse(turn, summed[outcome.index], outcome.used, next_day)
            if not isinstance(outcome, InFlight):
                self._held = outcome.id
                return None
            if not waited:  # the cap could be crossed by calls in flight: let them settle
                waited = True
                cap = summed[outcome.index]
                log.info("spend.waiting_for_calls_in_flight", cap=cap.name, scope=cap.scope,
                         used=outcome.used, reserved=outcome.reserved, limit=cap.limit)
            await asyncio.sleep(pause)
            pause = min(pause * 2, _WAIT_MAX_S)

    async def _refuse(self, turn: TurnInfo, cap: _Cap, used: float,
                      next_day: datetime) -> SpendRefusal:
        refusal = self._refusal(cap, used, next_day)
        await self._reached(turn, refusal)
        return refusal

    def _own(self, turn: TurnInfo, amount: UsageRecord, *, model: str) -> UsageRecord:
        """``amount`` as this session's row (who it counts against)."""
        ident = self.identity
        return UsageRecord(
            session_id=turn.session_id, turn_id=turn.turn_id, binding=ident.binding,
            platform=ident.platform, user=ident.user, thread=ident.thread or ident.session_id,
            model=model, input_tokens=amount.input_tokens, output_tokens=amount.output_tokens,
            cost_usd=amount.cost_usd)

    async def release(self, *, turn: TurnInfo, spent: bool) -> None:
        held, self._held = self._held, None
        if held is not None:
            await self.ledger.release(held, at_ms=int(self.clock() * 1000), spent=spent)

    def _refusal(self, cap: _Cap, used: float, next_day: datetime) -> SpendRefusal:
        if cap.period == "day":
            resets = next_day.strftime("%Y-%m-%d %H:%M %Z")
            when, reset_text = "today", f"it resets at {resets}"
        elif cap.period == "thread":
            resets = "never"
            when, reset_text = "in this thread", "it does not reset (start a new thread)"
        else:
            resets = "next turn"
            when, reset_text = "by this turn", "it applies to each turn"
        message = (f"{cap.name} ({cap.scope}) reached: "
                   f"{_amount(used, cap.usd)} of {_amount(cap.limit, cap.usd)} used {when}; "
                   f"{reset_text}. The model was not called.")
        return SpendRefusal(cap=cap.name, scope=cap.scope, used=used, limit=cap.limit,
                            resets_at=resets, message=message)

    async def _reached(self, turn: TurnInfo, refusal: SpendRefusal) -> None:
        log.warning("spend.cap_reached", cap=refusal.cap, scope=refusal.scope,
                    used=refusal.used, limit=refusal.limit)
        if self.observer is not None:
            self.observer.publish(SpendCapReached(
                session_id=turn.session_id, cap=refusal.cap, binding=self.identity.binding,
                platform=self.identity.platform))
        if self.timeline is not None:
            await self.timeline.append(
                session_id=turn.session_id, turn_id=turn.turn_id, kind="spend.cap_reached",
                correlation_id=turn.correlation_id,
                payload={"cap": refusal.cap, "scope": refusal.scope, "used": refusal.used,
                         "limit": refusal.limit, "resets_at": refusal.resets_at},
            )

    async def record(
        self, *, turn: TurnInfo, model: str, usage: Usage, cost_usd: float | None
    ) -> None:
        ident = self.identity
        rec = self._own(turn, UsageRecord(
            session_id="", input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
            cost_usd=cost_usd), model=model)
        held, self._held = self._held, None
        # Never raises, never drops the row: a row the store refuses is written again until
        # it lands, and the call's reservation counts against the caps until then.
        await self.ledger.record(rec, at_ms=int(self.clock() * 1000), reservation=held)
        if self.observer is not None:
            self.observer.publish(UsageRecorded(
                session_id=turn.session_id, binding=ident.binding, platform=ident.platform,
                model=model, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                cost_usd=cost_usd))


async def usage_status_lines(
    *, ledger: UsageLedger, budgets: BudgetSettings, binding: str, caps: SpendCaps,
    now: float | None = None, thread: str = "", platform: str = "", user: str = "",
) -> list[str]:
    """``/status`` lines: today's usage of ``binding`` against its per-day caps; with
    ``thread`` and ``user`` (``/usage``) also the thread's tokens and the user's today, each
    against the caps that count them (the binding's and the daemon's), summed as they do."""
    day_start, next_day = day_window(time.time() if now is None else now, budgets.timezone)
    filters = [UsageFilter(since_ms=day_start, binding=binding)]
    if thread:
        filters.append(UsageFilter(thread=thread))
    if user:  # in this channel (the binding's cap), and in all of them (the daemon's)
        filters += [UsageFilter(since_ms=day_start, binding=binding, platform=platform, user=user),
                    UsageFilter(since_ms=day_start, platform=platform, user=user)]
    sums = await ledger.totals(filters)
    lines = [_today_line(sums[0], caps, next_day)]
    if thread:
        limits = _limits(("max_tokens_per_thread", caps, "channel"),
                         ("max_tokens_per_thread", budgets, "daemon"))
        lines.append(f"this thread: {sums[1].tokens:,} tokens{limits} "
                     f"({sums[1].calls} model calls)")
    if user:
        here, everywhere = sums[-2], sums[-1]
        limits = _limits(("max_tokens_per_user_per_day", caps, "channel"))
        line = f"you today: {here.tokens:,} tokens here{limits}"
        if budgets.max_tokens_per_user_per_day is not None:
            line += (f", {everywhere.tokens:,} in all channels of "
                     f"{budgets.max_tokens_per_user_per_day:,} (daemon cap)")
        lines.append(line)
    return lines


def _limits(*caps: tuple[str, SpendCaps, str]) -> str:
    """`` of 50,000 (channel cap)`` for each of ``caps`` that is set; `` (no cap)`` if none."""
    shown = [f"{limit:,} ({where} cap)" for name, holder, where in caps
             if (limit := getattr(holder, name)) is not None]
    return f" of {' and '.join(shown)}" if shown else " (no cap)"


def _today_line(today: UsageTotals, caps: SpendCaps, next_day: datetime) -> str:
    tokens = f"{today.tokens:,} tokens"
    if caps.max_tokens_per_day is not None:
        tokens += f" of {caps.max_tokens_per_day:,}"
    parts = [tokens]
    if today.cost_usd is not None or caps.max_usd_per_day is not None:
        cost = f"${today.cost_usd or 0.0:,.4f}"
        if caps.max_usd_per_day is not None:
            cost += f" of ${caps.max_usd_per_day:,.4f}"
        parts.append(cost)
    resets = next_day.strftime("%Y-%m-%d %H:%M %Z")
    return f"usage today: {', '.join(parts)} ({today.calls} model calls; resets {resets})"
