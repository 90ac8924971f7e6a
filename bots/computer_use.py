"""Computer-use channels: a binding with ``computer_use = true`` drives the daemon's X display
(:class:`geode.daemon.display.ComputerDisplay`).

* One computer-use turn at a time per display: the run phase (:func:`bots.turn.run.on_display`)
  holds the display for the whole turn (a pointer and a keyboard cannot serve two agents); a
  turn of another thread waits, FIFO, outside the lanes (it holds no slot meanwhile), and its
  ``/status`` says so; ``/stop`` takes it out of the wait. The hold ends however the turn
  ends (answer, error, ``/stop``, shutdown).
* People can watch: :class:`ScreenWatch` posts the screen to the thread after the agent's
  actions, at most every ``[computer] screenshot_every_s`` and never two uploads at once,
  and once more when the turn ends (when it used the screen).
* An approval request for a ``computer`` action comes with the screen it would act on
  (:func:`approval_screen`), posted just before the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog

from geode.loop.events import ToolResulted

if TYPE_CHECKING:
    from bots.events import ReplyTarget
    from bots.port import PlatformClient
    from bots.store import ApprovalRecord
    from geode.daemon.display import ComputerDisplay
    from geode.loop import LoopEvent
    from geode.settings import BindingSettings

__all__ = ["ScreenWatch", "approval_screen"]

log = structlog.get_logger(__name__)

#: takes the screenshot of a display (PNG bytes); the computer tool's own, by default
Shoot = Callable[[str], Awaitable[bytes]]


async def _shoot(display: str) -> bytes:
    from geode.tools.builtin.desktop import screenshot_png

    return await screenshot_png(display)


class ScreenWatch:
    """Posts a computer-use turn's screen to its thread (see the module docstring)."""

    def __init__(
        self, *, client: PlatformClient, target: ReplyTarget, display: str, every_s: float,
        shoot: Shoot = _shoot,
    ) -> None:
        self.client = client
        self.target = target
        self.display = display
        self.every_s = every_s
        self.shoot = shoot
        #: the turn ran a computer action (the end of the turn then shows the screen)
        self.used = False
        #: uploads that went out
        self.posted = 0
        self._changed = asyncio.Event()
        self._last_post = float("-inf")
        self._last_hash = ""
        self._one_at_a_time = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.every_s > 0:
            self._task = asyncio.create_task(self._loop(), name="screen-watch")

    def tee(
        self, sink: Callable[[LoopEvent], Awaitable[None]] | None
    ) -> Callable[[LoopEvent], Awaitable[None]]:
        """``sink`` that also tells this watch about the turn's computer actions."""

        async def both(event: LoopEvent) -> None:
            # a denied action did nothing on screen: nothing new to show
            if (isinstance(event, ToolResulted) and event.name == "computer"
                    and event.status != "denied"):
                self.used = True
                self._changed.set()
            if sink is not None:
                await sink(event)

        return both

    async def _loop(self) -> None:
        while True:
            await self._changed.wait()
            wait = self.every_s - (time.monotonic() - self._last_post)
            if wait > 0:
                await asyncio.sleep(wait)  # throttled: the latest screen goes out then
            self._changed.clear()
            async with self._one_at_a_time:
                await self._post("🖥 The screen now", skip_same=True)

    async def close(self, *, final: bool) -> None:
        """Stop watching (an upload in flight finishes first); with ``final`` and a turn
        that used the screen, post the screen as the turn ends it."""
        task, self._task = self._task, None
        if task is not None:
            async with self._one_at_a_time:  # never cut an upload off halfway
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if final and self.used:
            await self._post("🖥 The screen at the end of the turn", skip_same=False)

    async def _post(self, caption: str, *, skip_same: bool) -> None:
        self._last_post = time.monotonic()
        try:
            png = await self.shoot(self.display)
        except Exception as exc:  # watching is a view: it never fails the turn
            log.info("computer.screenshot_failed", display=self.display, error=str(exc))
            return
        digest = hashlib.sha256(png).hexdigest()
        if skip_same and digest == self._last_hash:
            return  # nothing changed on screen since the last one
        try:
            await self.client.upload(self.target, filename=f"screen-{self.posted + 1}.png",
                                     data=png, caption=caption, image=True)
        except Exception as exc:
            log.info("computer.screen_upload_failed", error=str(exc))
            return
        self._last_hash = digest
        self.posted += 1


def approval_screen(
    computer: ComputerDisplay | None, binding: BindingSettings, client: PlatformClient,
    target: ReplyTarget, *, shoot: Shoot = _shoot,
) -> Callable[[ApprovalRecord], Awaitable[None]] | None:
    """For a computer-use binding: what posts the screen before an approval request of a
    ``computer`` action, so the approver sees what it would act on (None otherwise)."""
    if computer is None or binding.computer_use is not True or "computer" not in binding.approve:
        return None

    async def post(rec: ApprovalRecord) -> None:
        if rec.tool != "computer":
            return
        try:
            png = await shoot(computer.name)
            await client.upload(target, filename=f"screen-{rec.short_id}.png", data=png,
                                caption=f"🖥 The screen now, for approval {rec.short_id}: "
                                        f"{rec.summary}", image=True)
        except Exception as exc:  # the request still goes out, without the picture
            log.info("computer.approval_screen_failed", error=str(exc))

    return post
