"""Progress while a turn runs: ack reaction, typing, one progress message edited as tools run.

The progress message is sent when the turn starts. Its intent was recorded with the turn's
outbox row before the send, its id is recorded after it (with the message index entry, in
one transaction that commits with the turn's next write:
:meth:`Outbox.record_progress_message`): it is both the user's
"working on it" and the handle the final answer is delivered through (see
:mod:`bots.outbound`). The ack reaction goes out alongside it. Typing starts only once the
turn has run ``typing_delay_s`` (a quick answer needs no "typing…" under a progress message
that already says so), then repeats every ``typing_interval_s``. Edits are throttled to
``edit_interval_s`` (Telegram allows roughly one edit per second per chat); the last state
always lands, unless the final answer replaces it first. A failing indicator never fails
the turn.

While the turn waits for a lane the message reads "⏳ Queued — N ahead" (edited as it moves).
Once it runs, its first line is a heartbeat — elapsed time, rounds, the current tool and the
tokens spent so far — re-rendered every ``heartbeat_interval_s`` even when nothing else
happens (edits stay throttled to ``edit_interval_s``).

A turn recovered after a restart keeps ONE placeholder: the one it sent before the crash,
edited at once to say it resumed (it may have shown a frozen "⌛ waiting for the model"
since). When the crash hid whether that placeholder was sent (an intent recorded, no id),
a platform that reads the thread back (:class:`ProgressFinder`: Slack, Discord) finds the
bot's unrecorded placeholder and it is reused; otherwise (Telegram) a new one is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

import structlog

from bots.events import ReplyTarget
from bots.port import DeliveryError, PlatformClient
from bots.store import Outbox, OutboxRow
from geode.loop import LoopEvent, model_wait_text
from geode.loop.events import (
    ModelResponded,
    ModelWaiting,
    ToolProposed,
    ToolResulted,
    TurnStarted,
)

__all__ = ["RESUMED", "ProgressFinder", "ProgressReporter"]

log = structlog.get_logger(__name__)

WORKING = "⏳ Working…"
#: the line of a turn recovered after a restart, a takeover or a store outage (the chat
#: says why it took a while)
RESUMED = "↻ Resumed after an interruption"
_MAX_LINES = 12


@runtime_checkable
class ProgressFinder(Protocol):
    """A platform that can read back the progress placeholders the bot posted (a kill may
    have hidden one before its id was recorded). Telegram's Bot API cannot."""

    async def find_progress(self, target: ReplyTarget, *, since: datetime) -> list[str]:
        """The ids of the bot's messages in the thread, posted since ``since``, whose text
        is a progress placeholder (``⏳ …``), oldest first.

        Raises:
            DeliveryError: the thread could not be read.
        """
        ...


class ProgressReporter:
    """One turn's progress indicators."""

    def __init__(
        self, *, client: PlatformClient, outbox: Outbox, row: OutboxRow, target: ReplyTarget,
        inbound_message_id: str, edit_interval_s: float = 1.0, typing_interval_s: float = 4.0,
        typing_delay_s: float = 0.0, ack_emoji: str | None = "👀", fault: Any = None,
        heartbeat_interval_s: float = 15.0, recovered: bool = False,
    ) -> None:
        """``recovered``: the turn was accepted by a process that stopped before it ended
        (a restart or a takeover recovers it): its placeholder, if one was sent, is reused
        and says that the turn resumed."""
        self.client = client
        self.outbox = outbox
        self.row = row
        self.target = target
        self.inbound_message_id = inbound_message_id
        self.edit_interval_s = edit_interval_s
        self.typing_interval_s = typing_interval_s
        self.typing_delay_s = typing_delay_s
        self.ack_emoji = ack_emoji
        self._fault = fault or (lambda point: None)
        self.message_id: str | None = row.progress_message_id
        self.recovered = recovered
        self.lines: list[str] = []
        #: "waiting for the model (42 s, attempt 2/4)" while a model call is silent
        self.waiting: str | None = None
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

    async def start(self) -> None:
        """Ack and progress message (recorded) together; then typing (after
        ``typing_delay_s``), the heartbeat and the edits as the turn goes.

        Timers, not waiting tasks: a task is started only for work that is due (an edit,
        the typing repeats), so a quick turn's indicators cost no task at all."""
        reuse = self.recovered and self.message_id is None and self.row.progress_state == "sending"
        if reuse:
            # The intent was recorded but no id: the send's outcome is unknown.
            self.message_id = await self._find_lost()
        kept = self.message_id  # sent before the crash (recorded, or found again)
        send = asyncio.ensure_future(self._send_progress()) if self.message_id is None else None
        try:
            if self.ack_emoji:  # first, as it went first when both were gathered
                await self._quiet(self.client.react(self.target, self.inbound_message_id,
                                                    self.ack_emoji))
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

    async def _send_progress(self) -> None:
        # The intent to send was recorded with the row (before this send): a crash between
        # the send and the id's record leaves the restarted turn an intent without an id,
        # reconciled by :meth:`_find_lost`.
        text = self._text() if self.recovered else WORKING
        try:
            mid = await self.client.send(self.target, self.client.render_progress(text))
        except DeliveryError as exc:
            log.info("progress.send_failed", error=str(exc))
            return
        self._fault("progress_sent_before_record")
        self.message_id = mid
        await self.outbox.record_progress_message(self.row, mid)

    async def on_event(self, event: LoopEvent) -> None:
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

    def _touch(self) -> None:
        """An edit is due: the edit task takes it (started if none runs)."""
        self._dirty = True
        if self._edit_task is None and self._started and not self._closed:
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
                text = self._text()
                self._last_edit = time.monotonic()
                await self._quiet(self.client.edit(self.target, self.message_id,
                                                   self.client.render_progress(text)))
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
        for timer in (self._beat_timer, self._typing_timer):
            if timer is not None:
                timer.cancel()
        tasks = [t for t in (self._edit_task, self._typing_task) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

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
