"""The console's pages: Overview, Threads (and a thread), Approvals, Usage.

Each page gathers its data as a plain dict (what ``Accept: application/json`` gets) and
renders it with its template. Everything is limited to what the signed-in identity sees
(:class:`~bots.console.access.Access`): an approver's pages hold their bindings only, and
a thread or request of another binding is answered 404, as if it did not exist.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, unquote
from zoneinfo import ZoneInfo

from aiohttp import web

from bots.console.access import Access, Identity, binding_key
from bots.console.app import (
    ACCESS,
    DEPS_KEY,
    IDENTITY,
    ConsoleDeps,
    refuse,
    respond,
    see_other,
    session_of,
    wants_json,
)
from bots.console.chart import bar_chart

if TYPE_CHECKING:
    from bots.store import ApprovalRecord
    from bots.store.console import ThreadSummary
    from geode.settings import BindingSettings, SpendCaps
    from geode.store.usage import Grouping, UsageTotals

__all__ = ["approvals", "decide", "drop", "fork", "overview", "stop", "thread", "threads",
           "usage"]

#: the name a decision taken here carries in the thread ("approved by web console (42)")
DECIDED_WHERE = "web console"
USAGE_DAYS = 14


def _who(request: web.Request) -> tuple[ConsoleDeps, Identity, Access]:
    return request.app[DEPS_KEY], request[IDENTITY], request[ACCESS]


def _scope(b: BindingSettings) -> str:
    # the usage ledger's binding key (bots.bindings.spend_scope)
    return f"{b.platform}:{b.channel}"


def _day_start_ms(deps: ConsoleDeps, days_ago: int = 0) -> int:
    zone = ZoneInfo(deps.settings.budgets.timezone)
    now = datetime.fromtimestamp(deps.clock(), zone)
    start = now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=days_ago)
    return int(start.timestamp() * 1000)


def _totals(t: UsageTotals) -> dict[str, Any]:
    return {"calls": t.calls, "tokens": t.tokens, "input_tokens": t.input_tokens,
            "output_tokens": t.output_tokens, "cost_usd": t.cost_usd}


def _caps(where: str, caps: SpendCaps, today: UsageTotals) -> list[dict[str, Any]]:
    """The per-day caps set on ``where`` against today's spend (the other caps are per
    thread, user or turn: shown as set)."""
    out = []
    for name, limit in caps.caps().items():
        used: float | None = None
        if name == "max_tokens_per_day":
            used = float(today.tokens)
        elif name == "max_usd_per_day":
            used = today.cost_usd
        out.append({"where": where, "cap": name, "limit": limit, "used": used})
    return out


async def overview(request: web.Request) -> web.Response:
    """Readiness and lanes (operators), the queue, pending approvals, turns and tokens
    today, spend against every cap, and the replies of the last day that failed."""
    from bots.store import ApprovalRequests, ChannelQueue, ConsoleThreads
    from geode.store.usage import UsageFilter

    deps, who, access = _who(request)
    mine = access.bindings_of(who)
    operator = access.is_operator(who)
    ready: dict[str, Any] | None = None
    if operator and deps.readiness is not None:
        ok, checks = await deps.readiness()
        ready = {"ready": ok, "checks": checks}
    queued = [q for q in await ChannelQueue(store=deps.store).list()
              if access.sees_channel(who, q.platform, q.workspace, q.channel)]
    pending = [r for r in await ApprovalRequests(store=deps.store).pending()
               if access.sees_request(who, r) or access.may_decide(who, r)]
    since = _day_start_ms(deps)
    filters = [UsageFilter(since_ms=since, binding=_scope(b)) for b in mine]
    if operator:
        filters.append(UsageFilter(since_ms=since))
    sums = await deps.store.usage.totals(filters)
    day_ago = datetime.fromtimestamp(deps.clock() - 86400, UTC)
    errors = [e for e in await ConsoleThreads(store=deps.store).failed_replies(since=day_ago)
              if access.sees_channel(who, e["platform"], e["workspace"], e["channel"])]
    bindings = [{"key": binding_key(b), "platform": b.platform, "channel": b.channel,
                 "today": _totals(t)} for b, t in zip(mine, sums, strict=False)]
    caps: list[dict[str, Any]] = []
    for b, t in zip(mine, sums, strict=False):
        caps += _caps(f"binding {binding_key(b)}", b, t)
    today = sums[-1] if operator and sums else None
    if operator and today is not None:
        caps = _caps("[budgets] (daemon-wide)", deps.settings.budgets, today) + caps
    data = {
        "title": "Overview", "identity": str(who), "operator": operator,
        "readiness": ready,
        "lanes": deps.lanes() if operator and deps.lanes is not None else None,
        "queue": [{"id": q.id, "platform": q.platform, "channel": q.channel,
                   "thread": q.thread, "position": q.position,
                   "received_at": q.received_at.isoformat()} for q in queued],
        "pending_approvals": len(pending),
        "today": _totals(today) if today is not None else None,
        "bindings": bindings, "caps": caps,
        "recent_errors": errors[:20],
    }
    return respond(request, "overview.html", data)


async def threads(request: web.Request) -> web.Response:
    """The threads of each binding the identity sees; ``?q=`` searches, ``?binding=``
    narrows to one binding."""
    from bots.store import ConsoleThreads

    deps, who, access = _who(request)
    q = request.query.get("q", "").strip()[:100]
    only = request.query.get("binding", "")
    store = ConsoleThreads(store=deps.store)
    groups = []
    for b in access.bindings_of(who):
        if only and binding_key(b) != only:
            continue
        rows = await store.of_channel(b.platform, b.channel, team=b.team, search=q)
        groups.append({"binding": binding_key(b), "threads": [
            {"key": t.thread_key, "url": "/threads/" + quote(t.thread_key, safe=""),
             "title": t.title, "session_id": t.session_id, "thread_root": t.thread_root,
             "updated_at": t.updated_at} for t in rows]})
    return respond(request, "threads.html", {"title": "Threads", "q": q, "binding": only,
                                             "groups": groups})


async def thread(request: web.Request) -> web.Response:
    """One thread: its transcript, timeline, approval requests, effects, files in and
    out, queue place."""
    from bots.store import ApprovalRequests, AttachmentRecords, ChannelQueue, ConsoleThreads
    from geode.store.transcript import build_transcript

    deps, who, access = _who(request)
    key = unquote(request.match_info["key"])
    t = await ConsoleThreads(store=deps.store).get(key)
    if t is None or not access.sees_channel(who, t.platform, t.workspace, t.channel):
        return refuse(request, 404, "No such thread (or not one of your bindings).")
    restored = await deps.store.checkpointer(t.session_id).load()
    transcript = build_transcript(restored.messages if restored is not None else [],
                                  secrets=deps.store.secrets)
    timeline = await deps.store.timeline.list(t.session_id, limit=500)
    requests = await ApprovalRequests(store=deps.store).for_session(t.session_id)
    files = await AttachmentRecords(store=deps.store).for_session(t.session_id)
    receipts = await deps.store.receipts.list_for(t.session_id)
    sent_files = await ConsoleThreads(store=deps.store).files_out(t.session_id)
    queued = [q for q in await ChannelQueue(store=deps.store).list()
              if q.platform == t.platform and q.workspace == t.workspace
              and q.channel == t.channel and q.thread == t.thread_root]
    data = {
        "title": t.title or t.thread_key, "thread_key": t.thread_key,
        "session_id": t.session_id, "platform": t.platform, "channel": t.channel,
        "running": await _running(deps, t),
        "queue_position": queued[0].position if queued else None,
        "queued": [{"id": q.id, "position": q.position, "sender": q.sender,
                    "received_at": q.received_at} for q in queued],
        "transcript": [e.to_json() for e in transcript],
        "timeline": [{"id": r.id, "turn_id": r.turn_id, "kind": r.kind,
                      "payload": r.payload, "created_at": r.created_at} for r in timeline],
        "approvals": [_request(r, who, access) for r in requests],
        "files_in": [f.to_json() for f in files],
        "files_out": sent_files,
        "receipts": [{"turn_id": r.turn_id, "call_id": r.call_id, "tool": r.tool,
                      "status": r.status, "detail": r.detail, "approved_by": r.approved_by,
                      "approved_by_name": r.approved_by_name, "at": r.updated_at}
                     for r in receipts],
        # the page follows the thread live from its last timeline row (bots.console.live)
        "thread_url": "/threads/" + quote(t.thread_key, safe=""),
        "events_url": "/threads/" + quote(t.thread_key, safe="") + "/events?after="
                      + str(max((r.id for r in timeline), default=0)),
    }
    return respond(request, "thread.html", data)


async def drop(request: web.Request) -> web.Response:
    """Stop a message of the thread that waits for a lane (POST, CSRF-checked): it ends
    unanswered, its reply becomes a notice, as ``geode queue drop`` does. A turn already
    running is stopped with ``/stop`` in the thread."""
    from bots.store import ChannelQueue, ConsoleThreads

    deps, who, access = _who(request)
    t = await ConsoleThreads(store=deps.store).get(unquote(request.match_info["key"]))
    if t is None or not access.sees_channel(who, t.platform, t.workspace, t.channel):
        return refuse(request, 404, "No such thread (or not one of your bindings).")
    try:
        event_id = int(request.match_info["event"])
    except ValueError:
        return refuse(request, 404, "No such message.")
    queue = ChannelQueue(store=deps.store)
    mine = [q for q in await queue.list() if q.id == event_id and q.platform == t.platform
            and q.workspace == t.workspace and q.channel == t.channel
            and q.thread == t.thread_root]
    dropped = bool(mine) and await queue.drop(event_id)
    await deps.audit(who, session_of(request), "drop", session_id=t.session_id,
                     event_id=event_id, applied=dropped)
    if wants_json(request):
        return respond(request, "message.html", {"dropped": dropped},
                       status=200 if dropped else 409)
    return see_other("/threads/" + quote(t.thread_key, safe=""))


async def _running(deps: ConsoleDeps, t: ThreadSummary) -> dict[str, Any] | None:
    """The thread's running turn (or one waiting for a lane), as ``/status`` describes it
    when it runs in this process; else, as the store knows it, the turn of the thread's
    unfinished message and the replica holding the thread (``replica``). None when
    nothing runs."""
    from bots.store import ThreadStops

    turn = deps.running(t.thread_key) if deps.running is not None else None
    if turn is None:
        found = await ThreadStops(store=deps.store).running(
            t.platform, t.workspace, t.channel, t.thread_root)
        if found is None:
            return None
        return {"turn_id": "", "session_id": t.session_id, "seconds": None,
                "waiting_for_lane": False, "ahead": None, "progress": "", "approval": "",
                "stopping": found.stop is not None and found.stop.event_id == found.event_id,
                "replica": found.owner, "event_id": found.event_id}
    waiting = not turn.running and (turn.queued_ahead is not None or turn.display_wait)
    return {"turn_id": turn.loop_turn_id, "session_id": turn.session_id,
            "seconds": round(time.monotonic() - turn.started),
            "waiting_for_lane": waiting, "ahead": turn.queued_ahead if waiting else None,
            "progress": turn.heartbeat() if turn.heartbeat is not None else "",
            "approval": turn.waiting, "stopping": turn.stop_requested, "replica": ""}


async def stop(request: web.Request) -> web.Response:
    """Stop the thread's running turn (POST, CSRF-checked), as ``/stop`` in the thread does,
    wherever it runs. In this process: the same registry of running turns, so a turn
    waiting for a lane leaves the queue and a running one ends at its next step. In
    another replica: a stop request on the thread's lease, which that replica's heartbeat
    reads and acts on the same way (:class:`bots.store.ThreadStops`); asking again
    is the same request. The action is in the timeline and the audit log with the
    signed-in identity."""
    from bots.store import ConsoleThreads, ThreadStops

    deps, who, access = _who(request)
    t = await ConsoleThreads(store=deps.store).get(unquote(request.match_info["key"]))
    if t is None or not access.sees_channel(who, t.platform, t.workspace, t.channel):
        return refuse(request, 404, "No such thread (or not one of your bindings).")
    turn = deps.running(t.thread_key) if deps.running is not None else None
    asked = None
    if turn is not None:
        turn.cancel()
    else:
        asked = await ThreadStops(store=deps.store).request(
            t.platform, t.workspace, t.channel, t.thread_root, by=str(who))
    where = {"event_id": asked.event_id, "replica": asked.owner} if asked is not None else {}
    await deps.audit(who, session_of(request), "stop", session_id=t.session_id,
                     turn_id=turn.loop_turn_id if turn is not None else "",
                     applied=turn is not None, requested=asked is not None, **where)
    if wants_json(request):
        return respond(request, "message.html",
                       {"stopped": turn is not None, "requested": asked is not None, **where},
                       status=200 if turn is not None or asked is not None else 409)
    return see_other("/threads/" + quote(t.thread_key, safe=""))


async def fork(request: web.Request) -> web.Response:
    """Fork the thread's session after one of its finished turns (POST, CSRF-checked; form
    field ``at``: a turn number or id, empty for the latest), as ``geode sessions fork``
    does: a new session with its lineage, the original unchanged. In the audit log with
    the signed-in identity; the fork's own timeline opens with ``session.forked``."""
    from bots.store import ConsoleThreads
    from geode.errors import ConfigError
    from geode.replay import fork_session

    deps, who, access = _who(request)
    t = await ConsoleThreads(store=deps.store).get(unquote(request.match_info["key"]))
    if t is None or not access.sees_channel(who, t.platform, t.workspace, t.channel):
        return refuse(request, 404, "No such thread (or not one of your bindings).")
    form = await request.post()
    at = str(form.get("at", "")).strip()[:80] or None
    try:
        made = await fork_session(deps.store, t.session_id, at=at)
    except ConfigError as exc:
        return refuse(request, 409, str(exc))
    await deps.audit(who, session_of(request), "fork", session_id=t.session_id,
                     fork=made.session_id, turn=made.turn)
    data = {"forked": made.session_id, "parent_session_id": made.parent_session_id,
            "turn": made.turn, "turn_id": made.turn_id,
            "message": f"Forked after turn {made.turn} as session {made.session_id}: "
                     f"`geode run --session {made.session_id} ...` continues it.",
            "title": "Forked"}
    return respond(request, "message.html", data)


def _request(r: ApprovalRecord, who: Identity, access: Access) -> dict[str, Any]:
    return {"id": r.id, "short_id": r.short_id, "tool": r.tool, "summary": r.summary,
            "args": dict(r.args), "status": r.status, "platform": r.platform,
            "channel": r.channel, "thread_key": r.thread_key,
            "thread_url": "/threads/" + quote(r.thread_key, safe=""),
            "requested_by": r.requested_by, "requested_by_name": r.requested_by_name,
            "approvers": list(r.approvers), "requested_at": r.requested_at,
            "expires_at": r.expires_at, "decided_by": r.decided_by,
            "decided_by_name": r.decided_by_name, "decided_at": r.decided_at,
            "may_decide": r.pending and access.may_decide(who, r)
            and r.tool not in CONFIRMED_IN_THREAD}


async def approvals(request: web.Request) -> web.Response:
    """Pending requests on the identity's bindings, or that it may decide."""
    from bots.store import ApprovalRequests

    deps, who, access = _who(request)
    now = deps.now_ms()
    pending = [_request(r, who, access)
               for r in await ApprovalRequests(store=deps.store).pending()
               if r.expires_at > now and (access.sees_request(who, r)
                                          or access.may_decide(who, r))]
    return respond(request, "approvals.html", {"title": "Approvals", "pending": pending})


#: requests the console shows but does not decide: their confirmation runs in the thread
#: that asked (``/rewind``'s plan — bots.rewind_command.REWIND_TOOL — is carried out by the
#: ``/approve`` there; a decision taken here would be recorded and never run)
CONFIRMED_IN_THREAD = frozenset({"rewind"})


async def decide(request: web.Request) -> web.Response:
    """Approve or deny (POST, CSRF-checked by the session middleware): the same durable
    decision as ``/approve`` in the thread, taken once whichever side is first. The thread's
    wait sees the row change and edits its request message to say who decided and where."""
    from bots.store import ApprovalRequests

    deps, who, access = _who(request)
    form = await request.post()
    choice = str(form.get("decision", ""))
    if choice not in ("approve", "deny"):
        return refuse(request, 400, "decision must be approve or deny")
    try:
        request_id = int(request.match_info["id"])
    except ValueError:
        return refuse(request, 404, "No such request.")
    requests = ApprovalRequests(store=deps.store)
    rec = await requests.get(request_id)
    if rec is None or not (access.sees_request(who, rec) or access.may_decide(who, rec)):
        return refuse(request, 404, "No such request (or not one of your bindings).")
    if rec.tool in CONFIRMED_IN_THREAD:
        return refuse(request, 409, f"A {rec.tool} is confirmed in its thread: reply /approve "
                      "to its request there (it runs where it was asked).")
    if not access.may_decide(who, rec):
        await deps.audit(who, session_of(request), "approval_refused",
                         session_id=rec.session_id, request=rec.short_id, tool=rec.tool)
        return refuse(request, 403, f"{who} is not an approver of this request.")
    decision = await requests.decide(rec.id, approve=choice == "approve", by=who.user_id,
                                     by_name=DECIDED_WHERE, now_ms=deps.now_ms())
    await deps.audit(who, session_of(request), "approval", session_id=rec.session_id,
                     request=rec.short_id, tool=rec.tool, decision=choice,
                     applied=decision.applied, status=decision.record.status)
    data = {"applied": decision.applied, "status": decision.record.status,
            "request": _request(decision.record, who, access)}
    if wants_json(request):
        return respond(request, "message.html", data, status=200 if decision.applied else 409)
    return see_other("/approvals")


def _binding(b: BindingSettings, configured: set[int]) -> dict[str, Any]:
    """A binding as the Usage page lists it (read only), with where it comes from."""
    return {"key": binding_key(b), "platform": b.platform, "channel": b.channel,
            "team": b.team,
            "source": "config.toml" if id(b) in configured else "geode bindings add",
            "model": b.model or "(default)", "tools": b.tools, "approve": b.approve,
            "approvers": b.approvers, "allow_users": b.allow_users, "caps": b.caps()}


async def _schedules(deps: ConsoleDeps) -> list[dict[str, Any]]:
    """The scheduler's jobs (``geode schedule``, reminders), read only: operators see them
    (they span every binding, as the daemon-wide readiness does)."""
    from geode.store.jobs import ScheduledJobStore

    jobs = await ScheduledJobStore(store=deps.store).list()
    return [{"id": j.id, "when": j.cron or "once", "tz": j.tz or "UTC",
             "prompt": j.prompt if len(j.prompt) <= 200 else j.prompt[:199] + "…",
             "model": j.model or "(default)", "enabled": j.enabled,
             "next_run": j.next_run * 1000 if j.enabled else None,
             "last_run": j.last_run * 1000 if j.last_run is not None else None,
             "last_status": j.last_status, "runs": j.run_count} for j in jobs]


async def usage(request: web.Request) -> web.Response:
    """Tokens and cost by day (with a chart), binding, user or model, and the bindings (read
    only, with where each comes from). An approver sees its bindings' days and bindings only
    (the ledger's other groupings span every binding)."""
    from geode.store.usage import UsageFilter

    deps, who, access = _who(request)
    operator = access.is_operator(who)
    groupings = ("day", "binding", "user", "model") if operator else ("day", "binding")
    by = request.query.get("by", "day")
    if by not in groupings:
        return refuse(request, 400, f"by must be one of {', '.join(groupings)}")
    mine = access.bindings_of(who)
    since = _day_start_ms(deps, USAGE_DAYS - 1)
    rows: list[tuple[str, UsageTotals]]
    if operator and by in ("binding", "user", "model"):
        rows = await deps.store.usage.report(by=cast("Grouping", by), since_ms=since)
    elif operator:
        rows = await deps.store.usage.report(by="day", since_ms=since,
                                              tz=deps.settings.budgets.timezone)
    elif by == "binding":
        sums = await deps.store.usage.totals(
            [UsageFilter(since_ms=since, binding=_scope(b)) for b in mine])
        rows = [(_scope(b), t) for b, t in zip(mine, sums, strict=True)]
    else:
        starts = [_day_start_ms(deps, d) for d in range(USAGE_DAYS - 1, -1, -1)]
        ends = [*starts[1:], int(time.time() * 1000) + 1]
        filters = [UsageFilter(since_ms=s, until_ms=e, binding=_scope(b))
                   for s, e in zip(starts, ends, strict=True) for b in mine]
        sums = await deps.store.usage.totals(filters)
        zone = ZoneInfo(deps.settings.budgets.timezone)
        rows = []
        for i, s in enumerate(starts):
            day = sums[i * len(mine):(i + 1) * len(mine)]
            total = day[0] if day else None
            for t in day[1:]:
                total = total.plus(t) if total is not None else t
            if total is not None and total.calls:
                rows.append((datetime.fromtimestamp(s / 1000, zone).date().isoformat(), total))
    table = [{"key": k or "(outside channels)", **_totals(t)} for k, t in rows]
    configured = {id(b) for b in deps.settings.bindings}
    data: dict[str, Any] = {"title": "Usage", "by": by, "groupings": list(groupings),
                            "days": USAGE_DAYS, "rows": table,
                            "bindings": [_binding(b, configured) for b in mine],
                            "schedules": await _schedules(deps) if operator else None}
    if not wants_json(request):
        data["chart"] = bar_chart([(r["key"], float(r["tokens"])) for r in table],
                                  title=f"tokens by {by}, last {USAGE_DAYS} days")
    return respond(request, "usage.html", data)
