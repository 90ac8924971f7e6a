"""Thread commands: /new, /reset, /status, /stop, /help, /approve, /deny, /model, /usage.

Commands act on the thread they are written in and answer there (as an outbox notice).
They run at once, not behind the thread's queued turns: ``/stop`` must reach the turn it
stops, and ``/status`` must describe it while it runs.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bots.bindings import spend_scope
from bots.events import InboundEvent
from geode.secret_redaction import redact_text
from geode.settings import BindingSettings

if TYPE_CHECKING:
    from bots.approvals import ApprovalWaiters
    from bots.memory_commands import ThreadMemory
    from bots.reminders import ThreadReminders
    from bots.store import ApprovalRecord, ApprovalRequests, ThreadSessions
    from geode.daemon.port import HarnessPort

__all__ = ["COMMANDS", "ActiveTurn", "CommandContext", "PrivateReply", "allowed_models",
           "parse_command", "picked_model", "run_command"]

COMMANDS = ("new", "reset", "status", "stop", "help", "start", "approve", "deny", "model",
            "usage", "console", "remind", "reminders", "rewind", "memory",
            "forget")
_CMD = re.compile(r"^/([A-Za-z_]+)(?:@([A-Za-z0-9_]+))?(?:\s|$)")
#: what an approval request id looks like (``bots.store.approvals`` issues 6 of these)
_REQUEST_ID = re.compile(r"[A-Za-z0-9]{4,16}")


class PrivateReply(str):
    """A command's answer meant for its sender alone: shown as an ephemeral answer to a click
    (Slack ephemeral message, Discord ephemeral follow-up, Telegram callback toast) and never
    posted into the thread. A refusal to someone who may not approve is one: posted in the
    thread, each click or ``/approve`` of a non-approver would be a message for everyone (a
    flood lever). A typed ``/approve`` of a non-approver therefore gets no answer at all."""

    __slots__ = ()

HELP = (
    "Mention me (or reply to me) in a bound chat and I work on it in this thread; "
    "follow-ups in the thread need no mention.\n"
    "/status  session, model, running turn, last result, today's usage\n"
    "/stop    stop the running (or queued) turn of this thread\n"
    "/new     start a new session in this thread (the old one is kept as its parent)\n"
    "/reset   same as /new\n"
    "/approve, /deny  decide a pending approval request (reply to it, or give its id)\n"
    "/model   show this thread's model and the ones it may use; /model ID switches to one\n"
    "/usage   tokens of this thread and yours today, against their caps\n"
    "/memory  what I remember about you and this channel; /forget ID|all removes it\n"
    "/remind WHEN WHAT  I do WHAT here then (in 10m, tomorrow 09:00, every day 09:00, ...)\n"
    "/reminders  this thread's reminders; /reminders cancel ID cancels one\n"
    "/rewind [N]  take back this thread's last N turns (files too), after a confirmation\n"
    "/console (in a direct message to me) a sign-in link for the web console\n"
    "/help    this text"
)


@dataclass(kw_only=True)
class ActiveTurn:
    """A turn running now in a thread (what /stop and /status act on)."""

    session_id: str
    event_id: int
    started: float
    loop_turn_id: str = ""
    #: the harness said the turn started (``TurnStarted``): ``stop`` reaches it now
    running: bool = False
    #: stops the running turn through the harness port (``TurnHost.stop_turn``)
    stop: Callable[[], bool] | None = None
    stop_requested: bool = False
    #: "waiting for approval of … since …" while an approval request waits
    waiting: str = ""
    #: requests ahead of it while it waits for a lane (None: not queued)
    queued_ahead: int | None = None
    #: it waits for the computer display another thread's turn holds (bots.computer_use)
    display_wait: bool = False
    #: the turn's task while it is queued (``/stop`` ends the wait)
    queue_task: asyncio.Future[Any] | None = None
    #: the heartbeat line (elapsed, rounds, current tool, spend) while it runs
    heartbeat: Callable[[], str] | None = None

    def cancel(self) -> None:
        """Stop the turn: a queued one leaves the queue now; one that has not started yet
        stops as soon as it does."""
        self.stop_requested = True
        if self.running:
            if self.stop is not None:
                self.stop()
        elif (self.queued_ahead is not None or self.display_wait) and self.queue_task is not None:
            self.queue_task.cancel()


@dataclass(frozen=True, kw_only=True)
class CommandContext:
    """What the commands act on: the thread records, the harness (a session's status), the
    turns running now and the turns queued behind them."""

    threads: ThreadSessions
    host: HarnessPort
    active: Mapping[str, ActiveTurn]
    queued: Callable[[str], int]
    approvals: ApprovalRequests | None = None
    waiters: ApprovalWaiters | None = None
    memory: ThreadMemory | None = None
    reminders: ThreadReminders | None = None


def parse_command(text: str, bot_username: str | None) -> str | None:
    """The command name if ``text`` is one of ours (``/cmd`` or ``/cmd@thisbot``)."""
    m = _CMD.match(text.strip())
    if m is None:
        return None
    name, target = m.group(1).lower(), m.group(2)
    if target is not None and (bot_username is None or target.lower() != bot_username.lower()):
        return None  # addressed to another bot
    return name if name in COMMANDS else None


async def run_command(  # noqa: C901 - one dispatch line per command (handlers elsewhere)
    ctx: CommandContext, name: str, event: InboundEvent, binding: BindingSettings
) -> str:
    """Carry out a command; returns the text to answer with."""
    if name in ("help", "start"):
        return HELP
    if name == "stop":
        active = ctx.active.get(event.thread_key)
        if active is None:
            return "Nothing is running in this thread."
        queued = (active.queued_ahead is not None or active.display_wait) and not active.running
        active.cancel()
        if queued:
            return "Removed the queued message of this thread; it will not be answered."
        return f"Stopping the running turn (session {active.session_id})."
    if name in ("new", "reset"):
        previous, new = await ctx.threads.start_new(event, model=binding.model or "")
        lineage = f" (previous: {previous})" if previous else ""
        return f"🆕 New session {new}{lineage}."
    if name == "status":
        return await _status(ctx, event, binding)
    if name in ("approve", "deny"):
        return await _decide(ctx, event, approve=name == "approve")
    if name == "model":
        return await _model(ctx, event, binding)
    if name == "usage":
        return await _usage(ctx, event, binding)
    if name in ("memory", "forget"):
        from bots.memory_commands import memory_command

        return await memory_command(ctx.memory, name, event, binding)
    if name in ("remind", "reminders") and ctx.reminders is None:
        return "Reminders are not available here."
    if name == "remind" and ctx.reminders is not None:
        return await ctx.reminders.remind(event)
    if name == "reminders" and ctx.reminders is not None:
        return await ctx.reminders.reminders(event, binding)
    if name == "rewind":
        from bots.rewind_command import rewind_command

        return await rewind_command(ctx, event, binding)
    if name == "console":  # a direct message gets its link before the binding check
        from bots.console.chat_command import in_thread

        return in_thread(event)
    return HELP


def allowed_models(binding: BindingSettings) -> list[str]:
    """The ids ``/model`` may pick in the binding's threads: its ``model`` and its
    ``models`` (checked against the catalog at start). Empty: the default model only."""
    ids = [binding.model] if binding.model else []
    return ids + [m for m in binding.models if m not in ids]


def picked_model(binding: BindingSettings, chosen: str) -> str:
    """The thread's ``/model`` choice if the binding still allows it, else "" (its model).
    A choice the configuration no longer lists is not used (nor shown)."""
    return chosen if chosen and chosen in allowed_models(binding) else ""


async def _model(ctx: CommandContext, event: InboundEvent, binding: BindingSettings) -> str:
    from geode.errors import ConfigError
    from geode.providers.catalog import resolve_generation_model

    allowed = allowed_models(binding)
    choices = ", ".join(allowed) if allowed else "only the default model"
    parts = event.text.split()
    if len(parts) < 2:
        state = await ctx.threads.get(event.thread_key)
        current = picked_model(binding, state.model if state is not None else "")
        model = current or binding.model or "default"
        how = "chosen with /model" if current else "the channel's"
        return f"model: {model} ({how})\nthis channel may use: {choices}"
    wanted = parts[1]
    if wanted not in allowed:
        shown = re.sub(r"[^\w.:/-]", "?", redact_text(wanted)[:60])  # echoed, and kept
        try:
            resolve_generation_model(wanted)
        except ConfigError:
            return (f"Unknown model {shown!r} (not in `geode models`). "
                    f"This channel may use: {choices}.")
        return f"{shown} is not one this channel may use. Pick one of: {choices}."
    await ctx.threads.set_model(event, wanted)
    return f"This thread now uses {wanted}, from its next turn."


async def _usage(ctx: CommandContext, event: InboundEvent, binding: BindingSettings) -> str:
    """The thread's tokens and the sender's today, against the caps that count them."""
    lines = await ctx.host.usage_status(scope=spend_scope(binding), caps=binding,
                                        thread=event.thread_key, platform=event.platform,
                                        user=event.sender)
    return "\n".join(lines) if lines else "No usage is recorded here (no store)."


async def _find_request(
    reqs: ApprovalRequests, event: InboundEvent, arg: str
) -> ApprovalRecord | str:
    """The request a /approve or /deny means: by short id, by the message it replies to, or
    the one pending request of this channel. A text when it cannot tell."""
    rec: ApprovalRecord | None = None
    if arg:
        rec = await reqs.by_short_id(arg)
    elif event.reply_to is not None:
        rec = await reqs.by_message(event.platform, event.workspace, event.channel,
                                    event.reply_to)
    if rec is None and not arg:
        here = [r for r in await reqs.pending(platform=event.platform)
                if (r.workspace, r.channel) == (event.workspace, event.channel)]
        if len(here) > 1:
            ids = ", ".join(f"{r.short_id} ({r.tool})" for r in here)
            return f"Several requests are waiting here: {ids}. Reply to one, or give its id."
        rec = here[0] if here else None
    if rec is None or (rec.platform, rec.workspace, rec.channel) != (
            event.platform, event.workspace, event.channel):
        return f"No approval request {arg} here." if arg else "No approval request is waiting here."
    return rec


async def _decide(ctx: CommandContext, event: InboundEvent, *, approve: bool) -> str:
    from bots.approvals import outcome_line

    if ctx.approvals is None:
        return "Approvals are not available here."
    parts = event.text.split()
    arg = parts[1] if len(parts) > 1 else ""
    if arg and not _REQUEST_ID.fullmatch(arg):
        # never read as "the pending one": an argument that is no id decides nothing
        shown = re.sub(r"[^\w.-]", "?", redact_text(arg)[:24])  # echoed, and kept
        return (f"{shown!r} is not an approval request id; give the id the request shows "
                "(e.g. K7Q2XM), or reply to the request.")
    found = await _find_request(ctx.approvals, event, arg)
    if isinstance(found, str):
        return found
    if event.sender not in found.approvers:
        who = ", ".join(found.approvers) or "nobody"
        return PrivateReply(f"Only {who} may approve or deny this.")
    decision = await ctx.approvals.decide(found.id, approve=approve, by=event.sender,
                                          by_name=event.sender_name)
    if ctx.waiters is not None:
        ctx.waiters.wake(found.id)
    rec = decision.record
    if decision.applied and approve and rec.tool == "rewind":  # /rewind's confirmation
        from bots.rewind_command import rewind_confirmed

        return await rewind_confirmed(ctx, rec)
    if decision.applied:
        return f"{'✅' if approve else '🚫'} {rec.tool} ({rec.short_id}) {outcome_line(rec)}."
    if rec.pending:  # its time is up: the waiting turn marks it expired
        return f"{rec.tool} ({rec.short_id}) has expired."
    return f"{rec.tool} ({rec.short_id}) was {outcome_line(rec)} already."


async def _status(ctx: CommandContext, event: InboundEvent, binding: BindingSettings) -> str:
    state = await ctx.threads.get(event.thread_key)
    session_id = state.session_id if state is not None else event.thread_key
    status = await ctx.host.session_status(session_id)
    chosen = picked_model(binding, state.model if state is not None else "")
    model = chosen or status.model or binding.model
    lines = [f"session: {session_id}", f"model: {model or 'default'}"]
    if status.parent_session_id:
        lines.append(f"parent: {status.parent_session_id}")
    active = ctx.active.get(event.thread_key)
    if active is not None and active.queued_ahead is not None and not active.running:
        lines.append(f"queued: waiting for a lane, {active.queued_ahead} ahead")
    elif active is not None:
        lines.append(
            f"running: turn {active.loop_turn_id or '(starting)'} for "
            f"{time.monotonic() - active.started:.0f}s"
        )
        if active.heartbeat is not None:
            lines.append(f"progress: {active.heartbeat()}")
        if active.waiting:
            lines.append(active.waiting)
    else:
        lines.append("running: nothing")
    queued = ctx.queued(event.thread_key)
    if queued:
        lines.append(f"waiting in this thread: {queued}")
    lines.append(f"last turn: {status.last_termination or '-'}")
    lines += await ctx.host.usage_status(scope=spend_scope(binding), caps=binding)
    return "\n".join(lines)

