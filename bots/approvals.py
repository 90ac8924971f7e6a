"""Approvals in the thread: the executor's ``Approver`` for a channel turn.

A call of a tool in the binding's ``approve`` list reaches :class:`ChatApprover`. It writes
the request row first (:class:`bots.store.ApprovalRequests`), then posts the request in the
thread: what will happen in plain words (a unified diff for ``write_file`` / ``edit_file``,
the command and working directory for ``run_bash``, server / tool / arguments for an MCP
tool), who asked, when it expires and its short id. It then waits for ``/approve`` or
``/deny`` from one of the binding's approvers (``bots.commands``), for the expiry, or for
``/stop``. The decision is the row's: the command updates it once and wakes the wait here;
the wait also re-reads the row every few seconds, so a decision taken through another replica
is seen too. The request message is edited to show the outcome, who decided and when.

A wait ends with the request cancelled only when the turn was stopped (``/stop``). When the
process stops (a restart, a deploy, a thread taken over by another replica) the request
stays pending: the resumed turn asks for the same call again, :meth:`ApprovalRequests.open`
returns the same row (no second message), and the wait resumes with its original expiry,
or ends at once with the decision taken meanwhile. A kill between posting the request and
recording its message id leaves a resumed row without one: the thread is read back first
(:meth:`PlatformClient.find_approval`, the bot's request carrying the short id) and the
message found there is recorded instead of posting the request again. Where the platform
cannot read back what the bot posted (Telegram's Bot API) it is posted once more.

The approver sees the whole call (issue #30, finding 8): white space and invisible
characters are shown as marks (``␠`` times 3000, ``⏎`` times 200:
``geode.executor.summary``), and a call whose diff, command or arguments are longer than
the message shows (:data:`POSTED_DIFF_CHARS`) is attached whole as a file through the
platform's upload path (``<tool>-<id>.diff`` for a diff, ``<tool>-<id>.txt`` otherwise),
with the same marks.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from bots.port import ApprovalControls, DeliveryError, ReadBack
from geode.executor.decisions import ApprovalAnswer, ApprovalCancelled, ApprovalRequest
from geode.executor.summary import describe_call, full_call, full_diff
from geode.secret_redaction import redact_text

if TYPE_CHECKING:
    from bots.events import InboundEvent, ReplyTarget
    from bots.port import PlatformClient
    from bots.store import ApprovalRecord, ApprovalRequests, MessageIndex
    from bots.uploads import FileSender
    from geode.settings import BindingSettings

__all__ = ["ApprovalWaiters", "ChatApprover", "outcome_line"]

log = structlog.get_logger(__name__)

#: a diff, command or arguments longer than this is cut in the request message, and
#: attached whole as a file
POSTED_DIFF_CHARS = 1200


class ApprovalWaiters:
    """Wakes the wait of a request in this process when a command decided it."""

    def __init__(self) -> None:
        self._events: dict[int, asyncio.Event] = {}

    def event(self, request_id: int) -> asyncio.Event:
        return self._events.setdefault(request_id, asyncio.Event())

    def wake(self, request_id: int) -> None:
        ev = self._events.get(request_id)
        if ev is not None:
            ev.set()

    def drop(self, request_id: int) -> None:
        self._events.pop(request_id, None)


def _diff_name(rec: ApprovalRecord, *, diff: bool = True) -> str:
    return f"{rec.tool}-{rec.short_id}.{'diff' if diff else 'txt'}"


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S UTC")


def _who(rec: ApprovalRecord) -> str:
    return f"{rec.decided_by_name} ({rec.decided_by})" if rec.decided_by_name else rec.decided_by


def outcome_line(rec: ApprovalRecord) -> str:
    """The request's outcome as shown in the thread (and told to the model)."""
    if rec.status == "approved":
        return f"approved by {_who(rec)}"
    if rec.status == "denied":
        return f"denied by {_who(rec)}"
    if rec.status == "expired":
        return f"expired: nobody decided within {(rec.expires_at - rec.requested_at) // 1000}s"
    if rec.status == "cancelled":
        return "cancelled (the turn was stopped)"
    return "waiting"


def _answer(rec: ApprovalRecord) -> ApprovalAnswer:
    note = outcome_line(rec)
    by = _who(rec)
    return ApprovalAnswer(answer="allow" if rec.status == "approved" else "deny",
                          note=note, by=by, by_id=rec.decided_by, by_name=rec.decided_by_name,
                          outcome=rec.status)


@dataclass(kw_only=True)
class ChatApprover:
    """The ``Approver`` of one channel turn (see the module docstring)."""

    client: PlatformClient
    requests: ApprovalRequests
    waiters: ApprovalWaiters
    binding: BindingSettings
    event: InboundEvent
    target: ReplyTarget
    workspace: Path | None
    #: where the request message is filed under its thread (a reply to it belongs there)
    index: MessageIndex | None = None
    #: called with a line for ``/status`` while a request waits, and with "" after
    on_wait: Callable[[str], None] | None = None
    #: re-read the row this often while waiting (a decision taken on another replica)
    poll_s: float = 2.0
    #: True when the turn was stopped (``/stop``): a cancelled wait then cancels the
    #: request; otherwise (the process stopping) it stays pending for the resumed turn
    stopped: Callable[[], bool] = lambda: True
    #: posts what goes with a new request, just before it (a computer action: the screen)
    before_request: Callable[[ApprovalRecord], Awaitable[None]] | None = None
    #: attaches a long diff whole (``<tool>-<short_id>.diff``); None: the cut diff only
    files: FileSender | None = None
    #: test seam: called at named points (a test raises there to simulate a crash)
    fault: Callable[[str], None] = lambda point: None

    async def __call__(self, request: ApprovalRequest) -> ApprovalAnswer:
        b = self.binding
        if not b.approvers:
            return ApprovalAnswer(
                answer="deny",
                note=f"nobody may approve '{request.tool}' in this channel (its binding names "
                     "no approvers)",
            )
        summary = request.summary or await asyncio.to_thread(
            describe_call, request.tool, dict(request.args), self.workspace)
        diff, is_diff = await self._long_call(request)
        if diff is not None or len(summary) > POSTED_DIFF_CHARS + 200:
            # the message shows its start (never more than every platform's message holds);
            # the file has it all
            summary = await asyncio.to_thread(describe_call, request.tool, dict(request.args),
                                              self.workspace, diff_chars=POSTED_DIFF_CHARS)
        ev = self.event
        asked_at = int(time.time() * 1000)
        rec = await self.requests.open(
            session_id=request.session_id, turn_id=request.turn_id, call_id=request.call_id,
            thread_key=ev.thread_key, platform=ev.platform, workspace=ev.workspace,
            channel=ev.channel, thread_root=ev.thread_root, tool=request.tool,
            args=json.loads(json.dumps(dict(request.args), default=str)),
            summary=redact_text(summary), requested_by=ev.sender,
            requested_by_name=ev.sender_name, approvers=b.approvers,
            timeout_s=b.approval_timeout_s, now_ms=asked_at,
        )
        resumed = rec.requested_at != asked_at  # the row was there: asked before a restart
        posted: list[str] = []  # the request message once sent (before its row knows it)
        try:
            rec = await self._post(rec, diff, is_diff=is_diff, resumed=resumed, posted=posted)
            self._waiting(rec)
            # (the executor's approval step lends the turn's lane slots out meanwhile)
            decided = await self._wait(rec)
            return _answer(decided)
        except asyncio.CancelledError:  # /stop, or the daemon stopping
            # Anywhere from the row's writing on: a stop that lands while the request is
            # still being posted or filed cancels it and shows so as well as one during
            # the wait (it used to leave the message asking while the turn's end
            # cancelled the row behind it).
            if not self.stopped():
                log.info("approval.wait_interrupted", request=rec.id, short_id=rec.short_id)
                raise  # still pending: the resumed turn waits for it again
            await asyncio.shield(self._cancel(rec.id, posted))
            raise ApprovalCancelled() from None
        finally:
            if self.on_wait is not None:
                self.on_wait("")

    async def _post(self, rec: ApprovalRecord, diff: str | None, *, is_diff: bool,
                    resumed: bool, posted: list[str]) -> ApprovalRecord:
        """Post the request in the thread (once: a resumed row finds its message) and file
        it under the thread; the row as it is then. ``posted`` gets the message's id as
        soon as it is sent."""
        if rec.pending and rec.message_id is None and resumed:
            found = await self._find_posted(rec)
            if found is not None:
                posted.append(found)
                await self._file(rec, found)
                rec = await self.requests.get(rec.id) or rec
        if rec.pending and rec.message_id is None:
            try:
                if self.before_request is not None:
                    await self.before_request(rec)
                text = self._request_text(rec)
                if diff is not None and is_diff:
                    text += f"\nThe full diff is attached: {_diff_name(rec)}."
                elif diff is not None:
                    text += (f"\nThe whole call is attached: {_diff_name(rec, diff=False)} "
                             "(white space shown as ␠ ⏎ ⇥ marks).")
                elif "more chars)" in rec.summary:
                    text += "\n⚠️ The call is cut above and could not be attached here."
                chunk = self.client.render(text)[0]
                if isinstance(self.client, ApprovalControls):
                    message_id = await self.client.send_approval(self.target, chunk,
                                                                 short_id=rec.short_id)
                else:  # no buttons: a message answered with /approve ID or /deny ID
                    message_id = await self.client.send(self.target, chunk)
            except BaseException:
                await asyncio.shield(self.requests.cancel(rec.id))
                raise
            posted.append(message_id)
            self.fault("approval_sent_before_record")
            await self._file(rec, message_id)
            rec = await self.requests.get(rec.id) or rec
        elif rec.message_id is not None:
            posted.append(rec.message_id)
        if diff is not None and rec.pending:
            await self._attach(rec, diff, is_diff=is_diff)
        return rec

    async def _cancel(self, request_id: int, posted: list[str]) -> None:
        """The turn was stopped: cancel the request and show it on its message (the one
        posted, even when the row does not know it yet)."""
        cancelled = await self.requests.cancel(request_id)
        if cancelled.applied:
            shown = cancelled.record
            if shown.message_id is None and posted:
                shown = replace(shown, message_id=posted[-1])
            await self._show(shown)

    async def _find_posted(self, rec: ApprovalRecord) -> str | None:
        """The request message already in the thread (posted before a kill hid its id)."""
        if not isinstance(self.client, ReadBack):  # cannot read back: posted again
            return None
        since = datetime.fromtimestamp(rec.requested_at / 1000, UTC)
        try:
            found = await self.client.find_approval(self.target, short_id=rec.short_id,
                                                    since=since)
        except DeliveryError as exc:  # cannot tell: posting again beats a hidden request
            log.warning("approval.not_read_back", request=rec.id, error=str(exc))
            return None
        if found is not None:
            log.info("approval.found_in_thread", request=rec.id, short_id=rec.short_id)
        return found

    async def _file(self, rec: ApprovalRecord, message_id: str) -> None:
        """Record the request's message on its row and file it under its thread."""
        await self.requests.set_message(rec.id, message_id)
        if self.index is not None:
            ev = self.event
            await self.index.remember(
                platform=ev.platform, workspace=ev.workspace, channel=self.target.channel,
                message_ids=[message_id], thread_root=self.target.thread_root,
                from_bot=True)
        self._waiting(rec)  # filed: a reply to it reaches the thread, /status says so

    def _waiting(self, rec: ApprovalRecord) -> None:
        """The turn's ``/status`` line: what it waits for, since when."""
        if self.on_wait is not None:
            self.on_wait(f"waiting for approval of {rec.tool} ({rec.short_id}) since "
                         f"{_when(rec.requested_at)}")

    async def _long_call(self, request: ApprovalRequest) -> tuple[str | None, bool]:
        """The whole call (white space marked) when the request message would have to cut
        it, and whether it is a diff; (None, _) when it fits or nothing can be attached."""
        if self.files is None:
            return None, False
        args = dict(request.args)
        whole = await asyncio.to_thread(full_call, request.tool, args, self.workspace)
        if len(whole) <= POSTED_DIFF_CHARS:
            return None, False
        is_diff = await asyncio.to_thread(full_diff, request.tool, args,
                                          self.workspace) is not None
        return whole, is_diff

    async def _attach(self, rec: ApprovalRecord, diff: str, *, is_diff: bool = True) -> None:
        """Upload the whole call into the thread, once per request (keyed by its row: a
        resumed wait finds it sent and attaches nothing)."""
        assert self.files is not None
        what = "Full diff" if is_diff else "The whole call"
        try:
            outcome = await self.files.send(
                session_key=rec.session_id, turn_key=f"approval:{rec.id}:diff",
                target=self.target, filename=_diff_name(rec, diff=is_diff),
                data=redact_text(diff).encode(), caption=f"{what} of {rec.short_id}")
        except Exception:  # the request stands without it; its message shows the start
            log.warning("approval.diff_not_attached", request=rec.id, exc_info=True)
            return
        if outcome.status != "sent":
            log.warning("approval.diff_not_attached", request=rec.id, status=outcome.status,
                        error=outcome.error)

    def _request_text(self, rec: ApprovalRecord) -> str:
        who = rec.requested_by_name or rec.requested_by
        approvers = ", ".join(rec.approvers)
        return (f"🔐 Approval needed ({rec.short_id}): {rec.summary}\n\n"
                f"Asked by {who} (id {rec.requested_by}). Approvers: {approvers}. "
                f"Expires at {_when(rec.expires_at)}.\n"
                f"Reply /approve or /deny (or /approve {rec.short_id}).")

    async def _wait(self, rec: ApprovalRecord) -> ApprovalRecord:
        wake = self.waiters.event(rec.id)
        try:
            while True:
                wake.clear()
                current = await self.requests.get(rec.id)
                if current is None:
                    raise KeyError(rec.id)
                if not current.pending:
                    await self._show(current)
                    return current
                remaining = current.expires_at / 1000 - time.time()
                if remaining <= 0:
                    decision = await self.requests.expire(rec.id)
                    if not decision.record.pending:
                        await self._show(decision.record)
                        return decision.record
                    remaining = 0.05  # our clock runs ahead of the row's expiry by a hair
                try:
                    async with asyncio.timeout(min(remaining, self.poll_s)):
                        await wake.wait()
                except TimeoutError:
                    pass
        finally:
            self.waiters.drop(rec.id)

    async def _show(self, rec: ApprovalRecord) -> None:
        """Edit the request message to show the outcome, who decided and when."""
        if rec.message_id is None:
            return
        mark = {"approved": "✅", "denied": "🚫", "expired": "⌛", "cancelled": "⏹"}.get(
            rec.status, "")
        when = f" at {_when(rec.decided_at)}" if rec.decided_at else ""
        text = f"{mark} {rec.tool} ({rec.short_id}): {outcome_line(rec)}{when}.\n\n{rec.summary}"
        try:
            await self.client.edit(self.target, rec.message_id, self.client.render(text)[0])
        except Exception:  # the decision stands; the edit is only a view of it
            log.warning("approval.edit_failed", request=rec.id, exc_info=True)
