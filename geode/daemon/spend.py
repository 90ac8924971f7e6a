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
USD cap for an unpriced model). A call starts only while every cap is below its limit; the
call that crosses a limit finishes (its size is unknown before it is made) and the next one
is refused. Replicas share the ledger, so a cap holds across them up to the calls already
in flight when it is reached.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import structlog

from geode.hooks.events import SpendCapReached, UsageRecorded
from geode.loop.protocols import Observer, SpendRefusal, TurnInfo
from geode.messages import Usage
from geode.settings import BudgetSettings, SpendCaps
from geode.store.timeline import SessionTimeline
from geode.store.usage import UsageFilter, UsageLedger, UsageRecord, UsageTotals

__all__ = ["SpendControl", "SpendIdentity", "day_window", "usage_status_lines"]

log = structlog.get_logger(__name__)

Clock = Callable[[], float]


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
    ) -> None:
        self.ledger = ledger
        self.identity = identity
        self.budgets = budgets
        self.binding_caps = binding_caps
        self.clock = clock
        self.timeline = timeline
        self.observer = observer

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

    async def check(self, *, turn: TurnInfo, turn_cost_usd: float) -> SpendRefusal | None:
        now = self.clock()
        day_start, next_day = day_window(now, self.budgets.timezone)
        caps = self._caps(day_start)
        if not caps:
            return None
        summed = [c for c in caps if c.counts is not None]
        totals = dict(zip((c.name + c.scope for c in summed),
                          await self.ledger.totals([c.counts for c in summed if c.counts]),
                          strict=True))
        for cap in caps:
            if cap.counts is None:
                used = turn_cost_usd
            else:
                t = totals[cap.name + cap.scope]
                used = (t.cost_usd or 0.0) if cap.usd else float(t.tokens)
            if used >= cap.limit:
                refusal = self._refusal(cap, used, next_day)
                await self._reached(turn, refusal)
                return refusal
        return None

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
        rec = UsageRecord(
            session_id=turn.session_id, turn_id=turn.turn_id, binding=ident.binding,
            platform=ident.platform, user=ident.user,
            thread=ident.thread or ident.session_id, model=model,
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
            cost_usd=cost_usd,
        )
        try:
            await self.ledger.record(rec, at_ms=int(self.clock() * 1000))
        except Exception:
            # The call happened and its answer is in hand; losing the turn for a ledger row
            # would not un-spend it. The caps undercount by this call (logged loudly).
            log.exception("spend.record_failed", model=model)
        if self.observer is not None:
            self.observer.publish(UsageRecorded(
                session_id=turn.session_id, binding=ident.binding, platform=ident.platform,
                model=model, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                cost_usd=cost_usd))


async def usage_status_lines(
    *, ledger: UsageLedger, budgets: BudgetSettings, binding: str, caps: SpendCaps,
    now: float | None = None,
) -> list[str]:
    """``/status`` lines: today's usage of ``binding`` against its per-day caps."""
    day_start, next_day = day_window(time.time() if now is None else now, budgets.timezone)
    (today,) = await ledger.totals([UsageFilter(since_ms=day_start, binding=binding)])
    return [_today_line(today, caps, next_day)]


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
