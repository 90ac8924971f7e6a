"""Computer-use channels: a binding with ``computer_use = true`` drives the daemon's X display
(:class:`geode.daemon.display.ComputerDisplay`).

* One computer-use turn at a time per display: :func:`on_display` holds the display for
  the whole turn (a pointer and a keyboard cannot serve two agents); a turn of another
  thread waits, FIFO, outside the lanes (it holds no slot meanwhile), and its ``/status``
  says so; ``/stop`` takes it out of the wait. The hold ends however the turn ends (answer,
  error, ``/stop``, shutdown).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from bots.commands import ActiveTurn
    from geode.daemon.display import ComputerDisplay
    from geode.daemon.factory import SessionContext
    from geode.settings import BindingSettings

__all__ = ["on_display"]

_T = TypeVar("_T")


async def on_display(
    computer: ComputerDisplay | None, binding: BindingSettings, ctx: SessionContext,
    run: Callable[[SessionContext], Awaitable[_T]], *, holder: str, active: ActiveTurn,
    entered: Callable[[], None],
) -> _T:
    """``run(ctx)`` holding the display when ``binding`` enables computer use (its session
    then drives that display); other bindings' turns run at once.

    While another thread's turn (``holder`` names this one) has the display, ``active``
    says so for ``/status`` and ``/stop``, and ``entered`` is called: the turn is queued.
    """
    if computer is None or binding.computer_use is not True:
        return await run(ctx)

    def waiting(line: str) -> None:
        if line:
            entered()  # queued for the display: turns that arrived after it may go on
        active.display_wait = bool(line)
        active.waiting = line

    async with computer.turn(holder, on_wait=waiting) as display:
        return await run(replace(ctx, overrides=replace(ctx.overrides, display=display)))
