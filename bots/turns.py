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
import secrets
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from bots.commands import ActiveTurn
from bots.events import InboundEvent
from bots.inbound import StoredEvent
from bots.outbound import OutboxRow
from bots.progress import ProgressReporter
from geode.daemon.factory import Session, SessionContext
from geode.errors import ConfigError, GeodeError
from geode.loop import LoopEvent, TurnResult
from geode.redact import redact_text
from geode.settings import BindingSettings
from geode.store.sessions import short_title

if TYPE_CHECKING:
    from collections.abc import Callable

    from sqlalchemy.engine import Connection

    from bots.layer import ChannelLayer

__all__ = ["TurnRunner", "compose_prompt", "friendly_failure"]

log = structlog.get_logger(__name__)


class _StoppedBeforeStart(Exception):
    """/stop arrived before the turn's session was open."""


def compose_prompt(event: InboundEvent, history: list[InboundEvent]) -> str:
    """The model's input for one message: thread context (first contact), sender, text."""
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
    for a in event.attachments:
        parts.append(f"[attachment: {a.name or 'file'} {a.mime} {a.size} bytes, ref {a.ref}]")
    return "\n\n".join(parts)


def friendly_failure(result: TurnResult) -> str:
    """A short, useful text for a turn that did not end naturally (never a traceback)."""
    reason = result.termination.value.replace("_", " ")
    if result.termination.value == "cancelled":
        return "⏹ Stopped." + (f"\n\n{result.text}" if result.text and "[turn ended" not in
                              result.text else "")
    detail = (result.detail or "").strip().splitlines()
    hint = f": {detail[0][:300]}" if detail else ""
    body = result.text if result.text and not result.text.startswith("[turn ended") else ""
    return f"⚠️ I could not finish ({reason}{hint})." + (f"\n\n{body}" if body else "")


class TurnRunner:
    """Runs accepted turns of one layer."""

    def __init__(self, *, layer: ChannelLayer) -> None:
        self.layer = layer

    async def run(
        self, stored: StoredEvent, row: OutboxRow, binding: BindingSettings, *,
        prompt: str | None = None, resume: bool = False,
    ) -> None:
        layer = self.layer
        event = stored.event
        opts = layer.options
        progress = ProgressReporter(
            connector=layer.connector, outbox=layer.outbox, row=row, target=row.target,
            inbound_message_id=event.message_id, edit_interval_s=opts.progress_edit_interval_s,
            typing_interval_s=opts.typing_interval_s, typing_delay_s=opts.typing_delay_s,
            ack_emoji=opts.ack_emoji,
            fault=layer.fault, index=layer.index,
        )
        active = ActiveTurn(session_id=row.session_key, event_id=stored.id,
                            started=time.monotonic())
        layer.active[event.thread_key] = active
        try:
            await progress.start()
            layer.fault("progress_started")
            if prompt is None and not resume:
                prompt = await self._prompt(stored)
            text = await self._run_turn(stored, row, binding, prompt or "", progress, active,
                                        resume=resume)
        finally:
            if layer.active.get(event.thread_key) is active:
                del layer.active[event.thread_key]
            await progress.close()
        await self.finish(row, text)

    async def finish(self, row: OutboxRow, text: str) -> None:
        """Record the final answer (redacted, chunked), then deliver it."""
        layer = self.layer
        chunks = layer.connector.render(redact_text(text))
        ready = await layer.outbox.mark_ready(row.id, chunks, fence=self._fence(row))
        if ready is None:
            log.warning("turn.finished_elsewhere", row=row.id)
            return
        row = ready
        layer.fault("final_recorded")
        await layer.deliverer.deliver(row)
        layer.fault("delivered")

    def _fence(self, row: OutboxRow) -> Callable[[Connection], None]:
        """The check that this replica still holds the turn's thread, run inside each of the
        turn's writes (its checkpoints, its final answer): a replica that froze past its
        lease and woke up mid-turn writes nothing to a thread another replica took over."""
        leases, target = self.layer.thread_leases, row.target

        def held(conn: Connection) -> None:
            leases.check_held(conn, row.platform, row.workspace,
                              (target.channel, target.thread_root))

        return held

    async def _prompt(self, stored: StoredEvent) -> str:
        layer = self.layer
        event = stored.event
        history: list[InboundEvent] = []
        if event.starts_thread:
            return compose_prompt(event, history)
        state = await layer.threads.get(event.thread_key)
        fresh = state is None or not await layer.store.sessions.exists(state.session_id)
        if fresh:  # first contact with an existing thread: bootstrap its context
            history = await layer.inbound.thread_history(event, before_id=stored.id)
            try:
                history = [*await layer.connector.fetch_thread_history(event), *history]
            except Exception:
                log.warning("thread_history.fetch_failed", exc_info=True)
        elif event.context and event.reply_to is not None and await layer.index.thread_of(
                event.platform, event.workspace, event.channel, event.reply_to) is not None:
            # The quoted message was seen (or sent) by the bot: the session has it already.
            event = replace(event, context=())
        return compose_prompt(event, history)

    async def _run_turn(
        self, stored: StoredEvent, row: OutboxRow, binding: BindingSettings, prompt: str,
        progress: ProgressReporter, active: ActiveTurn, *, resume: bool = False,
    ) -> str:
        layer = self.layer
        event = stored.event

        async def sink(ev: LoopEvent) -> None:
            if ev.kind == "turn_started":
                active.loop_turn_id = str(ev.data.get("turn_id", ""))
                layer.fault("turn_started")
                if active.stop_requested and active.session is not None:
                    active.session.cancel()  # /stop came while the session was opening
            elif ev.kind == "tool_call":
                layer.fault("tool_call")
            await progress.on_event(ev)

        async def bind(session: Session) -> None:
            active.session = session
            active.model = session.model
            session.fence_saves(self._fence(row))
            if not resume:  # a resumed turn's message row went in with its first checkpoint
                # Who said what, on each message of a collaborative thread: written with the
                # turn's first checkpoint (the one holding the message), in its transaction.
                session.stage_timeline(
                    kind="channel.message", turn_id=row.loop_turn_id,
                    payload={"platform": event.platform, "channel": event.channel,
                             "thread": event.thread_root, "message_id": event.message_id,
                             "sender": event.sender, "sender_name": event.sender_name,
                             "event_id": stored.id},
                )
            if active.stop_requested:
                raise _StoppedBeforeStart

        ctx = SessionContext(
            mode="DAEMON", workspace=layer.host.workspace, session_id=row.session_key,
            binding=binding, user=event.sender, on_event=sink,
            # the thread's first message names it in `geode sessions list`
            title=short_title(redact_text(event.text)) if event.text.strip()
            else f"{event.platform} thread {event.thread_key}", thread=event.thread_key,
        )
        try:
            result = await layer.host.run_turn(ctx, prompt, kind="channel",
                                                lane_key=row.session_key, on_session=bind,
                                                turn_id=row.loop_turn_id or None,
                                                resume=resume)
        except asyncio.CancelledError:
            raise
        except _StoppedBeforeStart:
            return "⏹ Stopped."
        except ConfigError as exc:
            return f"⚠️ GEODE is not configured for this: {str(exc).splitlines()[0][:300]}"
        except GeodeError as exc:
            return f"⚠️ Something went wrong: {str(exc).splitlines()[0][:300]}"
        except Exception as exc:
            name = type(exc).__name__
            if name in ("LaneBusy", "ShuttingDown"):
                if name == "ShuttingDown":
                    raise  # not answered now: recovered on the next start
                return f"⏳ I am busy right now; please try again in a moment. ({exc})"
            log.exception("turn.failed")
            return f"⚠️ Something went wrong ({name}). The operator can find details in the logs."
        layer.fault("turn_finished")
        return (result.text or "(no answer)") if result.ok else friendly_failure(result)

    # -- recovery -------------------------------------------------------------------------------

    async def recover(self, stored: StoredEvent, row: OutboxRow,
                      binding: BindingSettings | None) -> None:
        """Finish a turn a previous run accepted but did not finish (see module docstring)."""
        layer = self.layer
        if row.status == "ready":
            await layer.deliverer.deliver(row)
            return
        if row.status != "pending":
            await layer.outbox.finish(row, status=row.status)
            return
        if row.loop_turn_id:
            restored = await layer.store.checkpointer(row.session_key).load()
            state: dict[str, Any] = restored.state if restored is not None else {}
            if restored is not None and state.get("turn_id") == row.loop_turn_id:
                if state.get("last_termination"):
                    text = _last_assistant_text(restored.messages) or (
                        f"[turn ended: {state['last_termination']}]")
                    log.info("recover.answer_from_checkpoint", row=row.id)
                    await self.finish(row, text)
                    return
                if binding is None:
                    await layer.outbox.finish(row, status="failed", error="binding removed")
                    return
                log.info("recover.resume_turn", row=row.id, turn=row.loop_turn_id,
                         recoveries=state.get("recoveries", 0))
                await self.run(stored, row, binding, resume=True)
                return
        if binding is None:
            await layer.outbox.finish(row, status="failed", error="binding removed")
            return
        rerun = f"t-{secrets.token_hex(6)}"
        await layer.outbox.update(row.id, loop_turn_id=rerun)
        await self.run(stored, replace(row, loop_turn_id=rerun), binding)


def _last_assistant_text(messages: list[Any]) -> str:
    for m in reversed(messages):
        if getattr(m, "role", "") == "assistant":
            text = str(getattr(m, "text", "") or "")
            if text:
                return text
        elif getattr(m, "role", "") == "user":
            break
    return ""
