"""What the platforms share with the progress message of a running turn: its texts, and the
ability to find a placeholder a crash hid (the reporter itself is the run phase's:
:class:`bots.turn.run.ProgressReporter`)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from bots.events import ReplyTarget
from bots.format import Chunk

__all__ = ["RESUMED", "WORKING", "DraftStreamer", "MessageRemover", "ProgressFinder"]

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


@runtime_checkable
class DraftStreamer(Protocol):
    """A platform with its own way to show an answer as it grows (a native streaming API, a
    browser's event stream). Without it the progress message is edited at the reporter's
    pace (:class:`bots.turn.run.ProgressReporter`), which is the default."""

    async def stream_draft(self, target: ReplyTarget, message_id: str, chunk: Chunk) -> None:
        """Show ``chunk`` (the whole draft so far) as the progress message ``message_id``.
        The final answer still replaces the message by an ordinary edit.

        Raises:
            DeliveryError: the platform refused it (the turn goes on; the next state is
                shown on the next call).
        """
        ...


@runtime_checkable
class MessageRemover(Protocol):
    """A platform that can delete the bot's own message: a streamed draft's page the final
    answer does not fill is removed (without it, the page is edited to ``…``)."""

    async def delete_message(self, target: ReplyTarget, message_id: str) -> None:
        """Delete ``message_id`` (a message already gone is no error).

        Raises:
            DeliveryError: the platform refused it.
        """
        ...
