"""The run phase: the turn in its thread while the harness runs it.

* :meth:`RunPhase.show` puts the turn in the thread: the 👀 ack and the progress message
  (:class:`ProgressReporter`), and the running turn where ``/stop`` and ``/status`` find it.
* :meth:`RunPhase.run` builds the session context (the binding's overrides, the event sink
  to the progress message, the thread's approvers, the channel's ``send_file`` tool, the
  write fence, the opening note) and enters the harness once (``run_turn``), in arrival
  order (:class:`EntryOrder`) and, for a computer-use binding, holding the display
  (:func:`on_display`). What the harness does comes back through one typed stream (the
  sink: ``TurnStarted`` first, then the loop's events); ``geode queue drop`` is honoured by
  the turn's admission (its queue entry claimed once it holds its lanes), ``/stop`` through
  the harness port (``stop_turn``), or by leaving the queue. The result becomes the
  thread's text.
* :meth:`RunPhase.hide` stops the indicators before the final answer replaces them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from bots.approvals import ChatApprover
from bots.commands import ActiveTurn, picked_model
from bots.computer_use import ScreenWatch, approval_screen
from bots.events import ReplyTarget
from bots.format import Chunk
from bots.port import DeliveryError, PlatformClient
from bots.progress import RESUMED, WORKING, ProgressFinder
from bots.send_file import make_send_file
from bots.store import Outbox, OutboxRow
from bots.turn.steps import Answered, Dropped, Prepared, Turn
from bots.turn.stream import AnswerStream
from geode.daemon.port import OpeningNote
from geode.daemon.session import SessionContext
from geode.errors import (
    ConfigError,
    GeodeError,
    NotAdmitted,
    ShuttingDown,
    StoreUnavailableError,
)
from geode.loop import LoopEvent, TurnResult, model_wait_text
from geode.loop.events import (
    ModelResponded,
    ModelWaiting,
    ToolProposed,
    ToolResulted,
    TurnStarted,
)
from geode.loop.termination import TerminationReason
from geode.secret_redaction import redact_text
from geode.store._retry import is_transient

if TYPE_CHECKING:
    from bots.turn.steps import TurnDeps
    from geode.daemon.display import ComputerDisplay
    from geode.settings import BindingSettings

__all__ = [
    "EntryOrder",
    "ProgressReporter",
    "RunPhase",
    "Shown",
    "friendly_failure",
    "on_display",
]

log = structlog.get_logger(__name__)

_T = TypeVar("_T")
_MAX_LINES = 12
#: a streamed answer's first words show this long after they came if ``progress_after_s``
#: (counted from the turn's start) is later; an answer complete sooner is the only message
FIRST_WORDS_AFTER_S = 0.3


def friendly_failure(result: TurnResult) -> str:
    """A short, useful text for a turn that did not end naturally (never a traceback)."""
    reason = result.termination.value.replace("_", " ")
    if result.termination.value == "cancelled":
        return "⏹ Stopped." + (f"\n\n{result.answer}" if result.answer else "")
    detail = (result.detail or "").strip().splitlines()
    hint = f": {redact_text(detail[0])[:300]}" if detail else ""  # masked, then cut
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


@dataclass(frozen=True, kw_only=True, repr=False)
class Shown:
    """A turn shown in its thread: its progress indicators and its running-turn entry."""

    turn: Turn
    progress: ProgressReporter
    active: ActiveTurn

    def __repr__(self) -> str:
        # not the running session's whole state (a traceback shows it in every frame)
        return f"Shown({self.turn!r})"


class RunPhase:
    """Runs the turns of one layer through the harness."""

    def __init__(self, *, deps: TurnDeps) -> None:
        self.deps = deps
        self._fault = deps.fault or _no_fault
        #: the thread each running turn's session answers in, by session id: where its
        #: ``send_file`` calls go (the tool is built once, not per turn)
        self._targets: dict[str, ReplyTarget] = {}
        self._send_file = make_send_file(client=deps.client, sender=deps.files,
                                         targets=self._targets)

    async def show(self, turn: Turn) -> Shown:
        """👀 and the progress message (recorded), and the turn where ``/stop`` and
        ``/status`` find it."""
        deps = self.deps
        opts = deps.options
        row = turn.row
        progress = ProgressReporter(
            client=deps.client, outbox=deps.outbox, row=row, target=row.target,
            inbound_message_id=turn.stored.event.message_id,
            edit_interval_s=opts.progress_edit_interval_s,
            typing_interval_s=opts.typing_interval_s, typing_delay_s=opts.typing_delay_s,
            ack_emoji=opts.ack_emoji, heartbeat_interval_s=opts.heartbeat_interval_s,
            fault=deps.fault, recovered=turn.recovered or turn.resume,
            stream=opts.stream, progress_after_s=opts.progress_after_ms / 1000,
        )
        active = ActiveTurn(session_id=row.session_key, event_id=turn.stored.id,
                            started=time.monotonic(), heartbeat=progress.heartbeat,
                            stop=functools.partial(deps.host.stop_turn, row.session_key))
        shown = Shown(turn=turn, progress=progress, active=active)
        deps.active[turn.thread] = active
        self._targets[row.session_key] = row.target
        try:
            await progress.start()
            self._fault("progress_started")
        except BaseException:
            await self.hide(shown)
            raise
        return shown

    async def hide(self, shown: Shown) -> None:
        """Stop the indicators (the final answer replaces the progress message); the turn
        runs no more."""
        turn = shown.turn
        if self.deps.active.get(turn.thread) is shown.active:
            del self.deps.active[turn.thread]
        if self._targets.get(turn.row.session_key) is turn.row.target:
            del self._targets[turn.row.session_key]
        await shown.progress.close()

    async def run(self, step: Prepared, shown: Shown) -> Answered | Dropped:
        """The turn through the harness, and the text its thread gets."""
        deps = self.deps
        turn = step.turn
        row = turn.row
        text: str | None
        try:
            text = await self._run_turn(step, shown)
        except NotAdmitted:  # `geode queue drop` took it while it waited
            text = None
        if row.loop_turn_id and (turn.resume or turn.binding.approve):
            # The turn ended (a resumed one may have ended before it asked again, e.g. at
            # the recovery limit): nothing waits on its requests any more. Only a resumed
            # turn or one with approvers can own one (a turn without asked nothing).
            await deps.approvals.end_turn(row.session_key, row.loop_turn_id,
                                          resumed=turn.resume)
        if text is None:  # its notice is the recorded answer
            log.info("turn.dropped_by_operator", thread=turn.thread, event_id=turn.stored.id)
            return Dropped(row=row)
        if step.notices:  # what was not read, and why (a transcript: masked), then the answer
            text = redact_text("\n".join(step.notices)) + "\n\n" + text
        return Answered(row=row, fence=turn.fence, text=text)

    async def _run_turn(self, step: Prepared, shown: Shown) -> str:
        deps = self.deps
        turn, progress, active = step.turn, shown.progress, shown.active
        stored, row, binding = turn.stored, turn.row, turn.binding

        async def sink(ev: LoopEvent) -> None:
            match ev:
                case TurnStarted(turn_id=turn_id):  # the harness's first word: it runs
                    deps.entry.entered(stored.id)
                    if active.queued_ahead is not None:
                        active.queued_ahead = None
                        active.started = time.monotonic()
                        progress.queued(None)
                    active.loop_turn_id = turn_id
                    active.running = True
                    self._fault("turn_started")
                    if active.stop_requested and active.stop is not None:
                        active.stop()  # /stop came while the session was opening
                case ToolProposed():
                    self._fault("tool_call")
                case _:
                    pass
            await progress.on_event(ev)

        def queued(ahead: int) -> None:
            deps.entry.entered(stored.id)
            active.queued_ahead = ahead
            progress.queued(ahead)

        # the thread's /model choice (a new thread has none: it is not looked up)
        state = (None if stored.event.starts_thread and not turn.recovered
                 else await deps.threads.get(turn.thread))
        model = picked_model(binding, state.model) if state is not None and state.model else ""
        ctx = self._session_context(turn, sink, active=active, model=model)
        await deps.entry.wait_turn(stored.id)

        # A turn that finds the lanes full waits queued, without a bound: its pending outbox
        # row keeps it across restarts (recovery queues it again under the same arrival id).
        # Admitted once it holds its lanes: its queue entry claimed, one conditional update
        # (`geode queue drop` may have taken it meanwhile: then it must not run).
        start = functools.partial(
            deps.host.run_turn, prompt=step.prompt, kind="channel", lane_key=row.session_key,
            admit=functools.partial(deps.queue.claim, stored.id),
            turn_id=row.loop_turn_id or None, resume=turn.resume,
            images=step.images, on_queued=queued, queue_order=stored.id)
        task = asyncio.ensure_future(on_display(
            deps.host.computer, binding, ctx, start, holder=turn.thread, active=active,
            entered=lambda: deps.entry.entered(stored.id), client=deps.client,
            target=row.target, progress=progress))
        active.queue_task = task
        try:
            result = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if (active.stop_requested and not active.running and task.cancelled()
                    and current is not None and not current.cancelling()):
                log.info("turn.unqueued", thread=turn.thread, event_id=stored.id)
                return "⏹ Stopped: your queued message was not run."
            raise
        except (ShuttingDown, NotAdmitted):
            raise  # not answered now: recovered on the next start / the notice is recorded
        except Exception as exc:
            return _error_text(exc)
        finally:
            active.queue_task = None
        self._fault("turn_finished")
        return _answer_text(result)

    def _session_context(
        self, turn: Turn, sink: Callable[[LoopEvent], Awaitable[None]], *, active: ActiveTurn,
        model: str = "",
    ) -> SessionContext:
        event = turn.stored.event
        row = turn.row
        return SessionContext(
            mode="DAEMON", workspace=turn.workspace, session_id=row.session_key,
            # the binding's overrides, fixed once per binding (Turn); the thread's /model
            overrides=replace(turn.overrides, model=model) if model else turn.overrides,
            user=event.sender,
            on_event=sink,
            approver=self._approver(turn, active),
            # the thread's first message names it in `geode sessions list`
            title=event.text if event.text.strip()  # one masked line: the harness cuts it
            else f"{event.platform} thread {turn.thread}", thread=turn.thread,
            source=event.platform, fence=turn.fence, stream=self.deps.options.stream,
            # channel-only tools: the thread this turn answers in is where a file goes
            extra_tools=[self._send_file, *self.deps.chat_tools],
            # Who said what, on each message of a collaborative thread: written with the
            # turn's first checkpoint (the one holding the message), in its transaction; a
            # resumed turn's went in with its first checkpoint already.
            opening_note=None if turn.resume else OpeningNote(
                kind="channel.message", turn_id=row.loop_turn_id,
                payload={"platform": event.platform, "channel": event.channel,
                         "thread": event.thread_root, "message_id": event.message_id,
                         "sender": event.sender, "sender_name": event.sender_name,
                         "event_id": turn.stored.id},
            ),
        )

    def _approver(self, turn: Turn, active: ActiveTurn) -> ChatApprover | None:
        """Asks the binding's approvers in the thread (None: the binding approves nothing)."""
        binding = turn.binding
        if not binding.approve:
            return None

        def waiting(line: str) -> None:
            active.waiting = line

        deps = self.deps
        return ChatApprover(
            client=deps.client, requests=deps.approvals, waiters=deps.waiters,
            binding=binding, event=turn.stored.event, target=turn.row.target,
            workspace=turn.workspace,
            index=deps.index, on_wait=waiting, stopped=lambda: active.stop_requested,
            before_request=approval_screen(deps.host.computer, binding, deps.client,
                                           turn.row.target),
            files=deps.files, fault=self._fault,
        )


def _no_fault(point: str) -> None:
    """The test seam when no test listens (here, so that it is no call out of the phase)."""


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
    if isinstance(exc, ConfigError):
        return f"⚠️ GEODE is not configured for this: {str(exc).splitlines()[0][:300]}"
    if isinstance(exc, GeodeError):
        return f"⚠️ Something went wrong: {str(exc).splitlines()[0][:300]}"
    log.error("turn.failed", exc_info=exc)
    return (f"⚠️ Something went wrong ({type(exc).__name__}). The operator can find "
            "details in the logs.")


async def on_display(
    computer: ComputerDisplay | None, binding: BindingSettings, ctx: SessionContext,
    run: Callable[[SessionContext], Awaitable[_T]], *, holder: str, active: ActiveTurn,
    entered: Callable[[], None], client: PlatformClient, target: ReplyTarget,
    progress: ProgressReporter | None = None,
) -> _T:
    """``run(ctx)`` holding the display when ``binding`` enables computer use (its session
    then drives that display, and a :class:`~bots.computer_use.ScreenWatch` posts the screen
    to ``target``); other bindings' turns run at once.

    One computer-use turn at a time per display (a pointer and a keyboard cannot serve two
    agents): a turn of another thread waits, FIFO, outside the lanes (it holds no slot
    meanwhile). While another thread's turn (``holder`` names this one) has the display,
    ``active`` says so for ``/status`` and ``/stop``, ``progress`` in the thread, and
    ``entered`` is called: the turn is queued. The hold ends however the turn ends.
    """
    if computer is None or binding.computer_use is not True:
        return await run(ctx)

    def waiting(line: str) -> None:
        if line:
            entered()  # queued for the display: turns that arrived after it may go on
        active.display_wait = bool(line)
        active.waiting = line
        if progress is not None:
            progress.waiting_on(f"Waiting for the computer display: {line.split(': ', 1)[1]}"
                                if line else None)

    async with computer.turn(holder, on_wait=waiting) as display:
        watch = ScreenWatch(client=client, target=target, display=display,
                            every_s=computer.screenshot_every_s)
        watch.start()
        ended = False
        try:
            result = await run(replace(ctx, on_event=watch.tee(ctx.on_event),
                                       overrides=replace(ctx.overrides, display=display)))
            ended = True
            return result
        finally:
            await watch.close(final=ended)


# -- progress in the thread -----------------------------------------------------------------------

_ACKS: set[asyncio.Future[None]] = set()

class ProgressReporter:
    """One turn's progress indicators: ack reaction, typing, one progress message edited as
    tools run.

    The progress message is sent when the turn starts. Its intent was recorded with the
    turn's outbox row before the send, its id is recorded after it (with the message index
    entry, in one transaction that commits with the turn's next write:
    :meth:`Outbox.record_progress_message`): it is both the user's "working on it" and the
    handle the final answer is delivered through (see :mod:`bots.turn.deliver`). The ack
    goes out beside the turn, never waited for (paced last: under load, first words go
    before other threads' acks). Typing starts once the turn ran ``typing_delay_s`` (a
    quick answer needs no "typing…"), then repeats every ``typing_interval_s``. Edits wait
    ``edit_interval_s`` (Telegram allows roughly one edit per second per chat); the last
    state always lands, unless the final answer replaces it first. A failing indicator
    never fails the turn.

    While the turn waits for a lane the message reads "⏳ Queued — N ahead" (edited as it
    moves). Once it runs, its first line is a heartbeat — elapsed time, rounds, the current
    tool and the tokens spent so far — re-rendered every ``heartbeat_interval_s`` even when
    nothing else happens (edits stay throttled to ``edit_interval_s``).

    A turn recovered after a restart keeps ONE placeholder: the one it sent before the
    crash, edited at once to say it resumed (it may have shown a frozen "⌛ waiting for the
    model" since). When the crash hid whether that placeholder was sent (an intent
    recorded, no id), a platform that reads the thread back
    (:class:`~bots.progress.ProgressFinder`: Slack, Discord) finds the bot's unrecorded
    placeholder and it is reused; otherwise (Telegram) a new one is sent.

    ``stream``: the answer grows in the message through one collaborator,
    :class:`~bots.turn.stream.AnswerStream` (paced edits across messages, a
    :class:`~bots.progress.DraftStreamer`'s preview, or the platform's native stream).
    ``progress_after_s``: the message is
    sent once the turn ran that long or its streamed words :data:`FIRST_WORDS_AFTER_S`.
    """

    def __init__(
        self, *, client: PlatformClient, outbox: Outbox, row: OutboxRow, target: ReplyTarget,
        inbound_message_id: str, edit_interval_s: float = 1.0, typing_interval_s: float = 4.0,
        typing_delay_s: float = 0.0, ack_emoji: str | None = "👀", fault: Any = None,
        heartbeat_interval_s: float = 15.0, recovered: bool = False, stream: bool = False,
        progress_after_s: float = 0.0,
    ) -> None:
        """``recovered``: accepted by a process that stopped before the turn ended (restart,
        takeover): its placeholder, if one was sent, is reused and says the turn resumed."""
        self.client = client
        self.outbox = outbox
        self.row = row
        self.target = target
        self.inbound_message_id = inbound_message_id
        self.edit_interval_s = edit_interval_s
        self.typing_interval_s = typing_interval_s
        self.typing_delay_s = typing_delay_s
        self.ack_emoji = ack_emoji
        self._fault = fault or _no_fault
        self.message_id: str | None = row.progress_message_id
        self.recovered = recovered
        self.lines: list[str] = []
        self.waiting: str | None = None  # "waiting for the model (42 s, attempt 2/4)"
        self.heartbeat_interval_s = heartbeat_interval_s
        #: requests ahead while the turn waits for a lane (None: not queued)
        self.queued_ahead: int | None = None
        self.started: float | None = None  # monotonic, once the turn runs
        self.rounds = 0
        self.tokens = 0
        self.tool: str | None = None  # the tool running now
        self._running = True  # False while queued for a lane
        self._last_edit = 0.0
        self._dirty = False  # an edit is due (the edit task runs while it is)
        self._started = False
        self._closed = False
        #: the indicator tasks, each only while it has work: a quick turn starts none
        self._edit_task: asyncio.Task[None] | None = None
        self._typing_task: asyncio.Task[None] | None = None
        #: typing waits for the turn to run (then ``typing_delay_s``)
        self._typing_due = False
        self._typing_timer: asyncio.TimerHandle | None = None
        self._beat_timer: asyncio.TimerHandle | None = None
        self.stream = stream
        #: the answer as it is written and where it shows (chosen once for the turn)
        self.answer = (AnswerStream(client=client, outbox=outbox, row=row, target=target)
                       if stream else None)
        self.progress_after_s = progress_after_s
        #: the deferred progress message: its timer, then its send (awaited by close: a
        #: message sent must have its id recorded before the answer is delivered)
        self._send_timer: asyncio.TimerHandle | None = None
        self._send_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Ack (beside) and progress message (recorded); then typing (after
        ``typing_delay_s``), the heartbeat and the edits as the turn goes.

        Timers, not waiting tasks: a task is started only for work that is due (an edit,
        the typing repeats), so a quick turn's indicators cost no task at all."""
        reuse = self.recovered and self.message_id is None and self.row.progress_state == "sending"
        if reuse:
            # The intent was recorded but no id: the send's outcome is unknown.
            self.message_id = await self._find_lost()
        kept = self.message_id  # sent before the crash (recorded, or found again)
        if self.ack_emoji:  # beside the turn, never awaited: see the class's docstring
            ack = asyncio.ensure_future(self._quiet(self.client.react(
                self.target, self.inbound_message_id, self.ack_emoji)))
            _ACKS.add(ack)  # held until it went (a turn may end first)
            ack.add_done_callback(_ACKS.discard)
        defer = self.message_id is None and not self.recovered and self.progress_after_s > 0
        send = (asyncio.ensure_future(self._send_progress())
                if self.message_id is None and not defer else None)
        if defer:
            # a quick answer needs no progress message: sent only if the turn runs this long
            self._send_timer = asyncio.get_running_loop().call_later(
                self.progress_after_s, self._send_deferred)
        try:
            if send is not None:
                await send
        except BaseException:
            if send is not None:
                send.cancel()
            raise
        if self.recovered and kept is not None:
            # At once, before the turn goes on: the placeholder may have shown a frozen
            # "⌛ waiting for the model" since the crash; now it says the turn resumed.
            self._last_edit = time.monotonic()
            await self._quiet(self.client.edit(self.target, kept,
                                               self.client.render_progress(self._text())))
        self._started = True
        self._typing_due = True
        if self._running:
            self._arm_typing()
        self._beat_timer = asyncio.get_running_loop().call_later(
            self.heartbeat_interval_s, self._beat)
        if self._dirty:
            self._touch()

    def queued(self, ahead: int | None) -> None:
        """The turn waits for a lane with ``ahead`` before it (None: it got its lanes)."""
        if ahead == self.queued_ahead:
            return
        self.queued_ahead = ahead
        if ahead is None:
            self._set_running()
            if self.started is None:
                self.started = time.monotonic()
        else:
            self._running = False
        self._touch()

    def waiting_on(self, line: str | None) -> None:
        """Show what the turn waits for (the computer display another thread's turn has),
        under the heartbeat; None: it waits no more."""
        if line != self.waiting:
            self.waiting = line
            self._touch()

    def heartbeat(self) -> str:
        """Elapsed time, rounds, the current tool and the tokens spent so far."""
        elapsed = 0 if self.started is None else int(time.monotonic() - self.started)
        parts = [_duration(elapsed), f"round {self.rounds}" if self.rounds else "starting"]
        if self.tool:
            parts.append(f"🔧 {self.tool}")
        if self.tokens:
            parts.append(f"{_tokens(self.tokens)} tokens")
        return " · ".join(parts)

    async def _find_lost(self) -> str | None:
        """The placeholder a crash hid (sent, id never recorded), found in the thread and
        recorded as this turn's; None if the platform cannot tell or there is none."""
        finder = self.client
        if not isinstance(finder, ProgressFinder):
            # Telegram: no history to read. A stray placeholder remains only if the crash
            # fell between the platform accepting the send and the id's record.
            log.info("progress.send_uncertain", row=self.row.id)
            return None
        since = self.row.created_at
        if since is None:
            return None
        try:
            found = await finder.find_progress(
                self.target, since=since if since.tzinfo else since.replace(tzinfo=UTC))
            # another turn's placeholder (recorded) is not this one's
            known = await self.outbox.recorded(self.row, found)
            lost = [m for m in found if m not in known]
        except DeliveryError as exc:
            log.info("progress.lookup_failed", row=self.row.id, error=str(exc))
            return None
        if not lost:
            return None
        mid = lost[-1]
        log.info("progress.placeholder_reused", row=self.row.id, message_id=mid)
        await self.outbox.record_progress_message(self.row, mid)
        return mid

    def _send_deferred(self) -> None:
        self._send_timer = None
        if not self._closed and self.message_id is None and self._send_task is None:
            self._send_task = asyncio.create_task(self._send_progress(now=True))

    async def _send_progress(self, *, now: bool = False) -> None:
        # The intent to send was recorded with the row (before this send): a crash between
        # the send and the id's record leaves the restarted turn an intent without an id,
        # reconciled by :meth:`_find_lost` (every state it sends starts with "⏳").
        # ``now``: sent late (``progress_after_s``), it shows the turn's state at once.
        text = self._text() if self.recovered or now else WORKING
        chunk = self._chunk(text) if now else self.client.render_progress(text)
        if now:
            self._dirty = False
            self._last_edit = time.monotonic()
        try:
            mid = await self.client.send(self.target, chunk)
        except DeliveryError as exc:
            log.info("progress.send_failed", error=str(exc))
            return
        self._fault("progress_sent_before_record")
        self.message_id = mid
        await self.outbox.record_progress_message(self.row, mid)
        if now and self._dirty:
            self._touch()

    async def on_event(self, event: LoopEvent) -> None:
        if self.answer is not None and self.answer.follow(event):
            loop, timer = asyncio.get_running_loop(), self._send_timer
            if timer is not None and self.answer.has_text and (
                    loop.time() + FIRST_WORDS_AFTER_S < timer.when()):  # the words are here
                timer.cancel()
                self._send_timer = loop.call_later(FIRST_WORDS_AFTER_S, self._send_deferred)
            self._touch()  # the answer being written: a text delta, a refused draft
            return
        match event:
            case TurnStarted():
                if self.started is None:
                    self.started = time.monotonic()
                self._set_running()
                if self.queued_ahead is None:
                    return  # the heartbeat shows it; no edit of its own
                self.queued_ahead = None
            case ModelWaiting():
                self.waiting = model_wait_text(event.kind, event.data)  # until the model answers
            case ModelResponded():
                # counted silently: the next edit (a tool, the heartbeat) shows them
                self.rounds += 1
                self.tokens += event.input_tokens + event.output_tokens
                if self.waiting is None:
                    return
                self.waiting = None
            case ToolProposed(name=name):
                self.tool = name
                self.lines.append(f"🔧 {name}")
            case ToolResulted(name=name, status=status):
                self.tool = None
                mark = {"ok": "✓", "denied": "⛔ denied", "error": "✗"}.get(status, status)
                for i in range(len(self.lines) - 1, -1, -1):
                    if self.lines[i] == f"🔧 {name}":
                        self.lines[i] = f"🔧 {name} {mark}"
                        break
            case _:
                return
        self._touch()

    def _text(self) -> str:
        resumed = [RESUMED] if self.recovered else []
        if self.queued_ahead is not None:
            return "\n".join([f"⏳ Queued — {self.queued_ahead} ahead", *resumed])
        shown = self.lines[-_MAX_LINES:]
        more = len(self.lines) - len(shown)
        head = [f"{WORKING} {self.heartbeat()}", *resumed] + (
            [f"… {more} earlier"] if more else [])
        tail = [f"⌛ {self.waiting}"] if self.waiting else []
        return "\n".join(head + shown + tail)

    def _chunk(self, text: str | None = None) -> Chunk:
        """The progress message as the platform shows it: the draft of a streaming turn
        under its heartbeat line, else the progress text."""
        text = self._text() if text is None else text
        if self.answer is not None and self.queued_ahead is None:
            drafted = self.answer.chunk(text)
            if drafted is not None:
                return drafted
        return self.client.render_progress(text)

    def _touch(self) -> None:
        """An edit is due: the edit task takes it (started if none runs; none before the
        message exists: its send shows the state then)."""
        self._dirty = True
        if (self._edit_task is None and self._started and not self._closed
                and self.message_id is not None):
            self._edit_task = asyncio.create_task(self._edit_loop())

    async def _edit_loop(self) -> None:
        """Edits while they are due, at most one per ``edit_interval_s``; then it ends (the
        next due edit starts another)."""
        try:
            while self._dirty:
                wait = self.edit_interval_s - (time.monotonic() - self._last_edit)
                if wait > 0:
                    await asyncio.sleep(wait)
                self._dirty = False
                if self.message_id is None or self._closed:
                    continue
                self._last_edit = time.monotonic()
                if self.answer is not None:  # the draft may span messages
                    self.message_id = await self.answer.show(
                        self.message_id, self._text(), queued=self.queued_ahead is not None)
                    continue
                await self._quiet(self.client.edit(self.target, self.message_id, self._chunk()))
        finally:
            self._edit_task = None

    def _beat(self) -> None:
        """The heartbeat: the first line is re-rendered even when nothing else happens."""
        if self._closed:
            return
        if self.queued_ahead is None:
            self._touch()
        self._beat_timer = asyncio.get_running_loop().call_later(
            self.heartbeat_interval_s, self._beat)

    def _set_running(self) -> None:
        self._running = True
        self._arm_typing()

    def _arm_typing(self) -> None:
        """"typing" says the turn runs: it starts ``typing_delay_s`` after the turn runs
        (not while it waits for a lane), then repeats every ``typing_interval_s``."""
        if not self._typing_due or self._closed:
            return
        self._typing_due = False
        if self.typing_delay_s > 0:
            self._typing_timer = asyncio.get_running_loop().call_later(
                self.typing_delay_s, self._start_typing)
        else:
            self._start_typing()

    def _start_typing(self) -> None:
        if not self._closed and self._typing_task is None:
            self._typing_task = asyncio.create_task(self._typing_loop())

    async def _typing_loop(self) -> None:
        while True:
            await self._quiet(self.client.typing(self.target))
            await asyncio.sleep(self.typing_interval_s)

    async def close(self) -> None:
        """Stop the indicators before the final answer replaces the progress message."""
        self._closed = True
        if self._send_task is not None:
            # a progress message on its way: its id is recorded before the answer goes
            with contextlib.suppress(Exception):
                await asyncio.shield(self._send_task)
        for timer in (self._beat_timer, self._typing_timer, self._send_timer):
            if timer is not None:
                timer.cancel()
        tasks = [t for t in (self._edit_task, self._typing_task) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self.answer is not None:  # a page sent has its id recorded before the answer
            await self.answer.settle()

    @staticmethod
    async def _quiet(coro: Any) -> None:
        try:
            await coro
        except DeliveryError as exc:
            log.debug("progress.indicator_failed", error=str(exc))
        except Exception:
            log.debug("progress.indicator_failed", exc_info=True)


def _duration(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds // 60 % 60:02d}m"


def _tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)
