"""The prepare phase: a turn's facts and its input, and what a recovered turn does next.

* :meth:`PreparePhase.turn` fixes the facts the other phases read (the thread key, the
  write fence, the binding's folder), so they never ask the event, the leases or the disk
  again.
* :meth:`PreparePhase.prepare` makes the model's input: the attachments received into the
  thread's folder, the thread's earlier messages on first contact, the prompt.
* :meth:`PreparePhase.recover` decides, from the outbox row and the checkpoint chain, what a
  turn a previous process accepted needs (see :mod:`bots.turn.driver`).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import stat
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from bots.attachments import Received, VoiceHost, receive_attachments, recorded_notices
from bots.bindings import session_overrides
from bots.events import InboundEvent
from bots.store.leases import ThreadClaim
from bots.turn.steps import Accept, Answered, Done, Prepared, Ready, Recover, Step, Turn
from bots.workspaces import binding_workspace, thread_folder

if TYPE_CHECKING:
    from bots.store import OutboxRow, StoredEvent
    from bots.turn.steps import TurnDeps
    from geode.daemon.port import Claim, SessionOverrides
    from geode.settings import BindingSettings

__all__ = ["PreparePhase", "compose_prompt"]

log = structlog.get_logger(__name__)


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


class PreparePhase:
    """Prepares the turns of one layer."""

    def __init__(self, *, deps: TurnDeps) -> None:
        self.deps = deps
        #: each binding's workspace path by what names it (``binding_workspace`` resolves
        #: the path on disk: a syscall per component, on every turn before)
        self._workspaces: dict[tuple[str, str, str, str], Path] = {}
        #: each binding's session overrides, made once per binding (and again when the
        #: binding changes), not on every turn
        self._overrides: dict[tuple[str, str, str], tuple[BindingSettings, SessionOverrides]] = {}

    def turn(self, step: Accept) -> Turn:
        """The facts of an accepted turn."""
        event = step.stored.event
        return Turn(stored=step.stored, row=step.row, binding=step.binding,
                    thread=event.thread_key, fence=self.fence(step.row),
                    workspace=self._workspace(step.binding),
                    overrides=self._session_overrides(step.binding), resume=step.resume,
                    recovered=step.recovered)

    def fence(self, row: OutboxRow) -> Claim:
        """This replica's claim on the turn's thread, checked inside each of the turn's
        writes (its checkpoints, its final answer): a replica that froze past its lease and
        woke up mid-turn writes nothing to a thread another replica took over."""
        return ThreadClaim(leases=self.deps.thread_leases, platform=row.platform,
                           workspace=row.workspace,
                           thread=(row.target.channel, row.target.thread_root))

    def answered(self, row: OutboxRow, text: str) -> Answered:
        """``text`` as the answer of ``row``'s turn (recorded under this replica's claim)."""
        return Answered(row=row, fence=self.fence(row), text=text)

    async def prepare(self, turn: Turn, prompt: str | None) -> Prepared:
        """The turn's input (``prompt``: given by the caller, or none to compose)."""
        received = Received()
        if prompt is None and not turn.resume:
            prompt, received = await self._prompt(turn)
        elif turn.resume and turn.stored.event.attachments:
            # the model has the prompt already (checkpointed); the user is still told
            # what was not read and what was heard, from the records: nothing is downloaded
            # or transcribed again
            received.notices = await recorded_notices(
                self.deps.attachments, turn.stored.id, event=turn.stored.event,
                workspace=turn.workspace, protected=(self.deps.host.home,))
        await _folder(turn.workspace)
        return Prepared(turn=turn, prompt=prompt or "", images=tuple(received.images),
                        notices=tuple(received.notices))

    def _workspace(self, binding: BindingSettings) -> Path:
        key = (binding.platform, binding.team, binding.channel, binding.workspace)
        found = self._workspaces.get(key)
        if found is None:
            found = self._workspaces[key] = binding_workspace(self.deps.host.home, binding)
        return found

    def _session_overrides(self, binding: BindingSettings) -> SessionOverrides:
        key = (binding.platform, binding.team, binding.channel)
        found = self._overrides.get(key)
        # compared by value with a copy: a binding read again, or changed in place, is seen
        if found is None or found[0] != binding:
            found = self._overrides[key] = (binding.model_copy(deep=True),
                                            session_overrides(binding))
        return found[1]

    async def _prompt(self, turn: Turn) -> tuple[str, Received]:
        """The turn's prompt, and what its attachments gave (images, notices for the user
        about attachments not read)."""
        stored = turn.stored
        event = stored.event
        received = Received()
        if event.attachments:
            deps = self.deps
            received = await receive_attachments(
                deps.client, event, binding=turn.binding, workspace=turn.workspace,
                folder=thread_folder(turn.workspace, event.thread_root),
                records=deps.attachments, event_id=stored.id, session_id=turn.row.session_key,
                fault=deps.fault, protected=(deps.host.home,),
                voice=deps.host.transcriber if isinstance(deps.host, VoiceHost) else None)
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

    async def recover(self, step: Recover) -> Step:
        """What a turn a previous run accepted but did not finish needs next (the crash
        points are listed in :mod:`bots.turn.driver`)."""
        deps = self.deps
        row, binding = step.row, step.binding
        if row.status == "ready":
            return Ready(row=row)
        if row.status != "pending":
            await deps.outbox.finish(row, status=row.status)
            return Done("finished")
        if row.loop_turn_id:
            outcome = await deps.host.turn_outcome(row.session_key, row.loop_turn_id)
            if outcome.state == "finished":
                log.info("recover.answer_from_checkpoint", row=row.id)
                return self.answered(row, outcome.reply)
            if outcome.state == "started":
                if binding is None:
                    return await self._unbound(row)
                log.info("recover.resume_turn", row=row.id, turn=row.loop_turn_id)
                return Accept(stored=step.stored, row=row, binding=binding, resume=True)
        if binding is None:
            return await self._unbound(row)
        # A re-run from the start gets a new loop turn id, recorded before it starts.
        rerun = f"t-{secrets.token_hex(6)}"
        await deps.outbox.update(row.id, loop_turn_id=rerun)
        return Accept(stored=step.stored, row=replace(row, loop_turn_id=rerun),
                      binding=binding, recovered=True)

    async def _unbound(self, row: OutboxRow) -> Done:
        await self.deps.outbox.finish(row, status="failed", error="binding removed")
        return Done("binding removed")


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
