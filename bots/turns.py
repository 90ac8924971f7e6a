"""One channel turn: from an accepted event to its recorded final reply.

Points where a crash can happen, and what the restart does (``recover``):

The outbox row carries the loop turn's id from the start (the turn runs under it).

- row ``pending``, the checkpoint chain has no checkpoint of that turn: the turn never
  started (or crashed before its first save) -> run it with the original prompt.
- the checkpoint shows the turn finished (``last_termination`` saved with that turn id):
  the answer is in the checkpoint -> deliver it, no model call.
- the checkpoint shows the turn started, unfinished: the user's message is in the chain
  -> resume the turn in place, under the same loop turn id, with its guard counters
  (rounds, time, spend) restored; tool calls left open get a result from the factory
  saying whether they ran (an effect of unknown outcome is never re-run). After
  ``[loop] recovery_limit`` resumes the turn is ended with a message instead.

A re-run from the start (no checkpoint of the turn) gets a new loop turn id, recorded
before it starts.
- row ``ready``: the answer is known -> deliver (idempotent edits).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from bots.approvals import ChatApprover
from bots.attachments import Received, receive_attachments, recorded_notices
from bots.bindings import spend_scope
from bots.commands import ActiveTurn
from bots.computer_use import approval_screen, on_display
from bots.events import InboundEvent
from bots.progress import ProgressReporter
from bots.send_file import make_send_file
from bots.store import OutboxRow, StoredEvent
from bots.workspaces import binding_workspace, thread_folder
from geode.daemon.port import Claim, OpeningNote, SessionOverrides
from geode.daemon.session import Session, SessionContext
from geode.errors import ConfigError, GeodeError, ShuttingDown, StoreUnavailableError
from geode.loop import LoopEvent, TurnResult
from geode.loop.events import ToolProposed, TurnStarted
from geode.loop.termination import TerminationReason
from geode.messages import ImageBlock
from geode.secret_redaction import redact_text
from geode.settings import BindingSettings
from geode.store._retry import is_transient
from geode.store.sessions import short_title

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from bots.approvals import ApprovalWaiters
    from bots.options import LayerOptions
    from bots.outbound import Deliverer
    from bots.port import PlatformClient, TurnHost
    from bots.store import (
        ApprovalRequests,
        AttachmentRecords,
        ChannelQueue,
        InboundLog,
        MessageIndex,
        Outbox,
        ThreadLeases,
        ThreadSessions,
    )
    from bots.uploads import FileSender

__all__ = [
    "EntryOrder",
    "TurnDeps",
    "TurnRunner",
    "compose_prompt",
    "friendly_failure",
    "session_overrides",
]

log = structlog.get_logger(__name__)


class _StoppedBeforeStart(Exception):
    """/stop arrived before the turn's session was open."""


class _DroppedByOperator(Exception):
    """``geode queue drop`` took the queued turn before it got its lanes."""


def compose_prompt(
    event: InboundEvent, history: list[InboundEvent], attachments: list[str] | None = None
) -> str:
    """The model's input for one message: thread context (first contact), sender, text, and
    its attachments (``attachments``: what the layer made of them, see bots.attachments)."""
    parts: list[str] = []
    # Recorded/fetched history is chronological; the payload's quoted message (the one
    # replied to) goes after it unless the history holds it already.
    context = [f"{h.sender_name or h.sender}: {h.text}" for h in history
               if h.text and h.message_id != event.message_id]
    context += [c for c in event.context if c not in context]
    if context:
        parts.append("[Earlier messages in this thread]\n" + "\n".join(context)
                     + "\n[End of earlier messages]")
    who = event.sender_name or event.sender
    parts.append(f"{who} (id {event.sender}): {event.text}".rstrip())
    if attachments is not None:
        parts.extend(attachments)
    else:
        for a in event.attachments:
            parts.append(f"[attachment: {a.name or 'file'} {a.mime} {a.size} bytes]")
    return "\n\n".join(parts)


def friendly_failure(result: TurnResult) -> str:
    """A short, useful text for a turn that did not end naturally (never a traceback)."""
    reason = result.termination.value.replace("_", " ")
    if result.termination.value == "cancelled":
        return "⏹ Stopped." + (f"\n\n{result.answer}" if result.answer else "")
    detail = (result.detail or "").strip().splitlines()
    hint = f": {detail[0][:300]}" if detail else ""
    body = result.answer
    return f"⚠️ I could not finish ({reason}{hint})." + (f"\n\n{body}" if body else "")


class EntryOrder:
    """Turns reach the lanes in arrival order (their inbound event ids).

    The turns a restart recovers start together and race to the lanes (each first asks
    the store and the platform something). Each registers its id as it starts (before its
    first await, so in submission order); about to ask for its lanes it first waits until
    every earlier registered one has entered them (queued or running) or ended, at most
    ``bound_s`` (a platform holding one back must not hold back the others). The lanes
    then keep that order. New messages do not register: they queue by their id anyway.
    """

    def __init__(self, *, bound_s: float = 5.0) -> None:
        self._open: dict[int, asyncio.Event] = {}
        self.bound_s = bound_s

    def register(self, key: int) -> None:
        self._open.setdefault(key, asyncio.Event())

    async def wait_turn(self, key: int) -> None:
        earlier = [ev for k, ev in sorted(self._open.items()) if k < key]
        if not earlier:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.bound_s):
                for ev in earlier:
                    await ev.wait()

    def entered(self, key: int) -> None:
        ev = self._open.pop(key, None)
        if ev is not None:
            ev.set()


@dataclass(frozen=True, kw_only=True)
class TurnDeps:
    """What running a channel turn uses (given at construction, never looked up)."""

    client: PlatformClient
    host: TurnHost
    inbound: InboundLog
    outbox: Outbox
    deliverer: Deliverer
    threads: ThreadSessions
    index: MessageIndex
    thread_leases: ThreadLeases
    options: LayerOptions
    #: the turns running now, by thread key (``/stop`` and ``/status`` read it)
    active: dict[str, ActiveTurn]
    #: test seam: called at named points; a test raises there to simulate a crash
    fault: Callable[[str], None]
    #: approval requests of the binding's ``approve`` tools, and the waits to wake
    approvals: ApprovalRequests
    waiters: ApprovalWaiters
    #: the order turns enter the lanes in
    entry: EntryOrder
    #: the claim a turn takes as it gets its lanes (``geode queue drop`` may have won it)
    queue: ChannelQueue
    #: files into the thread, exactly once (``send_file``; approvals' full diffs)
    files: FileSender
    #: what was received of each event's attachments (a recovered turn goes by it)
    attachments: AttachmentRecords


class TurnRunner:
    """Runs accepted turns of one layer."""

    def __init__(self, *, deps: TurnDeps) -> None:
        self.deps = deps
        #: each binding's workspace path by what names it (``binding_workspace`` resolves
        #: the path on disk: a syscall per component, on every turn before)
        self._workspaces: dict[tuple[str, str, str, str], Path] = {}

    def _workspace(self, binding: BindingSettings) -> Path:
        key = (binding.platform, binding.team, binding.channel, binding.workspace)
        found = self._workspaces.get(key)
        if found is None:
            found = self._workspaces[key] = binding_workspace(self.deps.host.home, binding)
        return found

    async def run(
        self, stored: StoredEvent, row: OutboxRow, binding: BindingSettings, *,
        prompt: str | None = None, resume: bool = False, recovered: bool = False,
    ) -> None:
        """Run an accepted turn (``resume``: in place, from its checkpoint; ``recovered``:
        a previous process accepted it, so its placeholder is reused and says it resumed)."""
        deps = self.deps
        event = stored.event
        opts = deps.options
        progress = ProgressReporter(
            client=deps.client, outbox=deps.outbox, row=row, target=row.target,
            inbound_message_id=event.message_id, edit_interval_s=opts.progress_edit_interval_s,
            typing_interval_s=opts.typing_interval_s, typing_delay_s=opts.typing_delay_s,
            ack_emoji=opts.ack_emoji, heartbeat_interval_s=opts.heartbeat_interval_s,
            fault=deps.fault, recovered=recovered or resume,
        )
        active = ActiveTurn(session_id=row.session_key, event_id=stored.id,
                            started=time.monotonic(), heartbeat=progress.heartbeat)
        deps.active[event.thread_key] = active
        try:
            await progress.start()
            deps.fault("progress_started")
            received = Received()
            if prompt is None and not resume:
                prompt, received = await self._prompt(stored, binding, row)
            elif resume and stored.event.attachments:
                # the model has the prompt already (checkpointed); the user is still told
                # what was not read, from the records: nothing is downloaded again
                received.notices = await recorded_notices(deps.attachments, stored.id)
            try:
                text = await self._run_turn(stored, row, binding, prompt or "", progress,
                                            active, resume=resume, images=received.images)
            except _DroppedByOperator:
                text = None
            if row.loop_turn_id:
                # The turn ended (a resumed one may have ended before it asked again, e.g.
                # at the recovery limit): nothing waits on its requests any more.
                await deps.approvals.end_turn(row.session_key, row.loop_turn_id,
                                              resumed=resume)
            notices = received.notices
            if notices and text is not None:  # what was not read, and why, before the answer
                text = "\n".join(notices) + "\n\n" + text
        finally:
            if deps.active.get(event.thread_key) is active:
                del deps.active[event.thread_key]
            await progress.close()
        if text is None:  # dropped by the operator: deliver the notice recorded as its answer
            log.info("turn.dropped_by_operator", thread=event.thread_key, event_id=stored.id)
            dropped = await deps.outbox.by_id(row.id)
            if dropped.status == "ready":
                await deps.deliverer.deliver(dropped)
            return
        await self.finish(row, text)

    async def finish(self, row: OutboxRow, text: str) -> None:
        """Record the final answer (redacted, chunked), then deliver it."""
        deps = self.deps
        chunks = deps.client.render(redact_text(text))
        ready = await deps.outbox.mark_ready(row.id, chunks, fence=self._fence(row))
        if ready is None:
            log.warning("turn.finished_elsewhere", row=row.id)
            return
        row = ready
        deps.fault("final_recorded")
        await deps.deliverer.deliver(row)
        deps.fault("delivered")

    def _fence(self, row: OutboxRow) -> Claim:
        """This replica's claim on the turn's thread, checked inside each of the turn's
        writes (its checkpoints, its final answer): a replica that froze past its lease and
        woke up mid-turn writes nothing to a thread another replica took over."""
        return self.deps.thread_leases.claim(row.platform, row.workspace,
                                              (row.target.channel, row.target.thread_root))

    async def _prompt(self, stored: StoredEvent, binding: BindingSettings, row: OutboxRow
                      ) -> tuple[str, Received]:
        """The turn's prompt, and what its attachments gave (images, notices for the user
        about attachments not read)."""
        event = stored.event
        received = Received()
        if event.attachments:
            workspace = self._workspace(binding)
            received = await receive_attachments(
                self.deps.client, event, binding=binding, workspace=workspace,
                folder=thread_folder(workspace, event.thread_root),
                records=self.deps.attachments, event_id=stored.id, session_id=row.session_key,
                fault=self.deps.fault, protected=(self.deps.host.home,))
        event, history = await self._context(stored)
        return compose_prompt(event, history, received.parts), received

    async def _context(self, stored: StoredEvent) -> tuple[InboundEvent, list[InboundEvent]]:
        """The event as the prompt shows it, and the thread's earlier messages to give."""
        deps = self.deps
        event = stored.event
        history: list[InboundEvent] = []
        if event.starts_thread:
            return event, history
        state = await deps.threads.get(event.thread_key)
        fresh = state is None or not (await deps.host.session_status(state.session_id)).exists
        if fresh:  # first contact with an existing thread: bootstrap its context
            history = await deps.inbound.thread_history(event, before_id=stored.id)
            try:
                history = [*await deps.client.fetch_thread_history(event), *history]
            except Exception:
                log.warning("thread_history.fetch_failed", exc_info=True)
        elif event.context and event.reply_to is not None and await deps.index.thread_of(
                event.platform, event.workspace, event.channel, event.reply_to) is not None:
            # The quoted message was seen (or sent) by the bot: the session has it already.
            event = replace(event, context=())
        return event, history

    def _approver(self, binding: BindingSettings, event: InboundEvent, row: OutboxRow,
                  active: ActiveTurn) -> ChatApprover | None:
        """Asks the binding's approvers in the thread (None: the binding approves nothing)."""
        if not binding.approve:
            return None

        def waiting(line: str) -> None:
            active.waiting = line

        deps = self.deps
        return ChatApprover(
            client=deps.client, requests=deps.approvals, waiters=deps.waiters,
            binding=binding, event=event, target=row.target,
            workspace=self._workspace(binding),
            index=deps.index, on_wait=waiting, stopped=lambda: active.stop_requested,
            before_request=approval_screen(deps.host.computer, binding, deps.client,
                                           row.target),
            files=deps.files, fault=deps.fault,
        )

    async def _run_turn(
        self, stored: StoredEvent, row: OutboxRow, binding: BindingSettings, prompt: str,
        progress: ProgressReporter, active: ActiveTurn, *, resume: bool = False,
        images: Sequence[ImageBlock] = (),
    ) -> str:
        deps = self.deps
        event = stored.event

        async def sink(ev: LoopEvent) -> None:
            match ev:
                case TurnStarted(turn_id=turn_id):
                    active.loop_turn_id = turn_id
                    deps.fault("turn_started")
                    if active.stop_requested and active.session is not None:
                        active.session.cancel()  # /stop came while the session was opening
                case ToolProposed():
                    deps.fault("tool_call")
                case _:
                    pass
            await progress.on_event(ev)

        def queued(ahead: int) -> None:
            deps.entry.entered(stored.id)
            active.queued_ahead = ahead
            progress.queued(ahead)

        async def bind(session: Session) -> None:
            deps.entry.entered(stored.id)
            if active.queued_ahead is not None:
                active.queued_ahead = None
                active.started = time.monotonic()
                progress.queued(None)
            active.session = session
            active.model = session.model
            if active.stop_requested:
                raise _StoppedBeforeStart
            if not await deps.queue.claim(stored.id):
                raise _DroppedByOperator  # `geode queue drop` won: it must not run

        # The binding's own folder: its file tools and sandbox see nothing of other channels.
        workspace = await _folder(self._workspace(binding))
        ctx = self._session_context(stored, row, binding, sink, workspace=workspace,
                                    active=active, resume=resume)
        await deps.entry.wait_turn(stored.id)

        # A turn that finds the lanes full waits queued, without a bound: its pending outbox
        # row keeps it across restarts (recovery queues it again under the same arrival id).
        start = functools.partial(
            deps.host.run_turn, prompt=prompt, kind="channel", lane_key=row.session_key,
            on_session=bind, turn_id=row.loop_turn_id or None, resume=resume, images=images,
            on_queued=queued, queue_order=stored.id)
        turn = asyncio.ensure_future(on_display(
            deps.host.computer, binding, ctx, start, holder=event.thread_key, active=active,
            entered=lambda: deps.entry.entered(stored.id), client=deps.client,
            target=row.target, progress=progress))
        active.queue_task = turn
        try:
            result = await turn
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if (active.stop_requested and active.session is None and turn.cancelled()
                    and task is not None and not task.cancelling()):
                log.info("turn.unqueued", thread=event.thread_key, event_id=stored.id)
                return "⏹ Stopped: your queued message was not run."
            raise
        except (ShuttingDown, _DroppedByOperator):
            raise  # not answered now: recovered on the next start / the notice is recorded
        except Exception as exc:
            return _error_text(exc)
        finally:
            active.queue_task = None
        deps.fault("turn_finished")
        return _answer_text(result)

    def _session_context(
        self, stored: StoredEvent, row: OutboxRow, binding: BindingSettings,
        sink: Callable[[LoopEvent], Awaitable[None]], *, workspace: Path, active: ActiveTurn,
        resume: bool,
    ) -> SessionContext:
        event = stored.event
        return SessionContext(
            mode="DAEMON", workspace=workspace, session_id=row.session_key,
            overrides=session_overrides(binding), user=event.sender, on_event=sink,
            approver=self._approver(binding, event, row, active),
            # the thread's first message names it in `geode sessions list`
            title=short_title(redact_text(event.text)) if event.text.strip()
            else f"{event.platform} thread {event.thread_key}", thread=event.thread_key,
            source=event.platform, fence=self._fence(row),
            # Who said what, on each message of a collaborative thread: written with the
            # turn's first checkpoint (the one holding the message), in its transaction; a
            # resumed turn's went in with its first checkpoint already.
            # channel-only tools: the thread this turn answers in is where a file goes
            extra_tools=[make_send_file(client=self.deps.client, sender=self.deps.files,
                                        target=row.target)],
            opening_note=None if resume else OpeningNote(
                kind="channel.message", turn_id=row.loop_turn_id,
                payload={"platform": event.platform, "channel": event.channel,
                         "thread": event.thread_root, "message_id": event.message_id,
                         "sender": event.sender, "sender_name": event.sender_name,
                         "event_id": stored.id},
            ),
        )

    # -- recovery -------------------------------------------------------------------------------

    async def recover(self, stored: StoredEvent, row: OutboxRow,
                      binding: BindingSettings | None) -> None:
        """Finish a turn a previous run accepted but did not finish (see module docstring)."""
        deps = self.deps
        if row.status == "ready":
            await deps.deliverer.deliver(row)
            return
        if row.status != "pending":
            await deps.outbox.finish(row, status=row.status)
            return
        if row.loop_turn_id:
            outcome = await deps.host.turn_outcome(row.session_key, row.loop_turn_id)
            if outcome.state == "finished":
                text = outcome.reply
                log.info("recover.answer_from_checkpoint", row=row.id)
                await self.finish(row, text)
                return
            if outcome.state == "started":
                if binding is None:
                    await deps.outbox.finish(row, status="failed", error="binding removed")
                    return
                log.info("recover.resume_turn", row=row.id, turn=row.loop_turn_id)
                await self.run(stored, row, binding, resume=True)
                return
        if binding is None:
            await deps.outbox.finish(row, status="failed", error="binding removed")
            return
        rerun = f"t-{secrets.token_hex(6)}"
        await deps.outbox.update(row.id, loop_turn_id=rerun)
        await self.run(stored, replace(row, loop_turn_id=rerun), binding, recovered=True)


async def _folder(path: Path) -> Path:
    """``path``, made if it is not there: once, or again if it was removed meanwhile.

    One ``stat`` on the loop per turn (as the system prompt's GEODE.md check), the thread
    hop of ``mkdir`` only when the folder is missing (it was one on every turn)."""
    if not _is_dir(path):
        await asyncio.to_thread(path.mkdir, parents=True, exist_ok=True)
    return path


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False


def _answer_text(result: TurnResult) -> str:
    """What a turn that ended says in its thread.

    Raises:
        StoreUnavailableError: its checkpoint could not be saved (nothing of the batch ran):
            the layer resumes it from its last checkpoint once the store takes writes again
            (and bounds how often), instead of ending it with an error.
    """
    if result.termination == TerminationReason.CHECKPOINT_FAILED:
        raise StoreUnavailableError(f"the turn's checkpoint was not saved: {result.detail}")
    if result.ok:
        return result.answer or "(no answer)"
    return friendly_failure(result)


def _error_text(exc: Exception) -> str:
    """The thread's one line for a turn that raised instead of ending (never a traceback).

    Raises:
        Exception: ``exc`` itself when the database went away (:func:`is_transient`): the
            layer resumes the turn once the store answers.
    """
    if is_transient(exc):
        raise exc
    if isinstance(exc, _StoppedBeforeStart):
        return "⏹ Stopped."
    if isinstance(exc, ConfigError):
        return f"⚠️ GEODE is not configured for this: {str(exc).splitlines()[0][:300]}"
    if isinstance(exc, GeodeError):
        return f"⚠️ Something went wrong: {str(exc).splitlines()[0][:300]}"
    log.error("turn.failed", exc_info=exc)
    return (f"⚠️ Something went wrong ({type(exc).__name__}). The operator can find "
            "details in the logs.")


def session_overrides(binding: BindingSettings) -> SessionOverrides:
    """A binding's session settings as the harness's neutral overrides."""
    return SessionOverrides(
        model=binding.model or None, prompt_addition=binding.system_prompt,
        tools=binding.tools, approve=tuple(binding.approve),
        computer_use=binding.computer_use is True,
        approve_actions={"computer": frozenset(binding.approve_computer_actions)}
        if "computer" in binding.approve else {},
        time_budget_s=binding.time_budget_s, spend_caps=binding,
        spend_scope=spend_scope(binding), skills=binding.skills,
    )
