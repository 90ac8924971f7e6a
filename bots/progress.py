"""What the platforms share with the progress message of a running turn: its texts, and the
ability to find a placeholder a crash hid (the reporter itself is the run phase's:
:class:`bots.turn.run.ProgressReporter`)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from bots.events import ReplyTarget

__all__ = ["RESUMED", "WORKING", "ProgressFinder"]

WORKING = "⏳ Working…"
#: the line of a turn recovered after a restart, a takeover or a store outage (the chat
#: says why it took a while)
RESUMED = "↻ Resumed after an interruption"


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
