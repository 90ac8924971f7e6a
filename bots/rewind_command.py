"""``/rewind [N]`` in a thread: take back the thread's last N turns (default 1).

The command plans the rewind (:func:`geode.rewind.plan_rewind`) and answers with what it
would do: the turns, the workspace files put back, the effects no rewind undoes (files or
messages sent, MCP and web calls) and, when it cannot run, why. Nothing moves yet: the
answer is an approval request (:class:`bots.store.ApprovalRequests`, tool ``rewind``), the
durable record a ``/approve`` or ``/deny`` decides, like a tool call's. One of the binding's
approvers confirms when its ``approve`` list names a tool the rewound turns used; otherwise
the person who asked does. The confirmation runs the rewind (:func:`geode.rewind.rewind`:
intent, files, head, whole or not at all) unless the thread moved on meanwhile.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from geode.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from bots.events import InboundEvent
    from bots.store import ApprovalRecord, ApprovalRequests, ThreadSessions
    from geode.daemon.port import HarnessPort
    from geode.rewind import BlobStore, RewindPlan
    from geode.settings import BindingSettings
    from geode.store import Store
    from geode.store.database import Database

__all__ = ["REWIND_TOOL", "CommandContext", "rewind_command", "rewind_confirmed"]

#: the tool name of a rewind's approval request
REWIND_TOOL = "rewind"
_N = re.compile(r"[1-9][0-9]{0,2}")


class CommandContext(Protocol):
    """What the rewind command uses of ``bots.commands.CommandContext`` (named here, not
    imported: the commands module imports this one)."""

    @property
    def threads(self) -> ThreadSessions: ...

    @property
    def host(self) -> HarnessPort: ...

    @property
    def active(self) -> Mapping[str, object]: ...

    @property
    def queued(self) -> Callable[[str], int]: ...

    @property
    def approvals(self) -> ApprovalRequests | None: ...


@runtime_checkable
class _WithStore(Protocol):
    """The daemon as the commands see it: its home and the harness's store."""

    @property
    def home(self) -> Path: ...

    @property
    def database(self) -> Database | None: ...


def _records(ctx: CommandContext) -> tuple[Store, BlobStore] | None:
    from geode.rewind import BlobStore
    from geode.store import Store

    host = ctx.host
    if not isinstance(host, _WithStore) or not isinstance(host.database, Store):
        return None
    return host.database, BlobStore(host.home / "rewind")


def _busy(ctx: CommandContext, thread_key: str) -> str | None:
    if ctx.active.get(thread_key) is not None or ctx.queued(thread_key):
        return ("A turn is running or waiting in this thread; wait for it (or /stop it), "
                "then /rewind.")
    return None


def _describe(plan: RewindPlan) -> str:
    numbers = ", ".join(str(t.number) for t in plan.turns)
    files = plan.files
    lines = [f"turn(s) {numbers} of this thread are taken back",
             f"files put back: {', '.join(files) if files else 'none'}"]
    if plan.irreversible:
        lines.append("cannot be undone: " + "; ".join(i.describe() for i in plan.irreversible))
    return "\n".join(lines)


async def rewind_command(ctx: CommandContext, event: InboundEvent,
                         binding: BindingSettings) -> str:
    """``/rewind [N]``: the plan, as an approval request to confirm (see the module doc)."""
    from geode.rewind import finish_pending, plan_rewind

    records = _records(ctx)
    if records is None or ctx.approvals is None:
        return "Rewind is not available here."
    parts = event.text.split()
    arg = parts[1] if len(parts) > 1 else "1"
    if not _N.fullmatch(arg):
        return "Give how many turns to take back: /rewind or /rewind 2."
    busy = _busy(ctx, event.thread_key)
    if busy:
        return busy
    state = await ctx.threads.get(event.thread_key)
    if state is None:
        return "Nothing to rewind in this thread yet."
    store, blobs = records
    await finish_pending(store, blobs, state.session_id)  # one a dead process left first
    try:
        plan = await plan_rewind(store, blobs, state.session_id, turns=int(arg))
    except ConfigError as exc:
        return str(exc).replace(f"Session {state.session_id!r}", "This thread")
    if plan.blockers:
        return "⏪ Cannot rewind: " + "; ".join(plan.blockers) + "."
    gated = bool(set(plan.tools) & set(binding.approve)) and bool(binding.approvers)
    approvers = list(binding.approvers) if gated else [event.sender]
    key = f"rewind:{uuid.uuid4().hex[:16]}"
    rec = await ctx.approvals.open(
        session_id=state.session_id, turn_id=key, call_id=key, thread_key=event.thread_key,
        platform=event.platform, workspace=event.workspace, channel=event.channel,
        thread_root=event.thread_root, tool=REWIND_TOOL,
        args={"turns": int(arg), "seq": plan.head_seq}, summary=_describe(plan),
        requested_by=event.sender, requested_by_name=event.sender_name, approvers=approvers,
        timeout_s=binding.approval_timeout_s)
    expires = datetime.fromtimestamp(rec.expires_at / 1000, UTC).strftime("%H:%M:%S UTC")
    who = (f"one of the approvers ({', '.join(approvers)})" if gated
           else "the person who asked")
    return (f"⏪ Rewind ({rec.short_id}): {rec.summary}\n\n"
            f"Nothing has changed yet. {who[0].upper()}{who[1:]} confirms with /approve "
            f"{rec.short_id} (or /deny {rec.short_id}) before {expires}.")


async def rewind_confirmed(ctx: CommandContext, rec: ApprovalRecord) -> str:
    """Run the rewind a ``/approve`` confirmed (the request was decided just now)."""
    from geode.rewind import plan_rewind, rewind
    from geode.store.rewinds import RewindConflictError

    records = _records(ctx)
    if records is None:
        return "Rewind is not available here."
    busy = _busy(ctx, rec.thread_key)
    if busy:
        return busy
    store, blobs = records
    try:
        plan = await plan_rewind(store, blobs, rec.session_id, turns=int(rec.args["turns"]))
        if plan.head_seq != int(rec.args["seq"]):
            raise RewindConflictError("the thread moved on since the rewind was asked")
        result = await rewind(store, blobs, plan, by=f"{rec.platform}:{rec.decided_by}",
                              by_name=rec.decided_by_name)
    except (ConfigError, RewindConflictError) as exc:
        return f"⏪ Nothing was rewound: {exc}. Ask again with /rewind."
    who = rec.decided_by_name or rec.decided_by
    files = ", ".join(result.restored) or "none"
    return (f"⏪ Rewound turn(s) {', '.join(map(str, result.turns))} (confirmed by {who}). "
            f"Files put back: {files}. The next message continues from before them; the "
            f"conversation as it was is kept as session {result.archive_session_id}.")
