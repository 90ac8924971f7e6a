"""The ``schedule`` tool: the model sets, lists and cancels reminders of the chat thread its
turn answers in.

Only a channel session has it: the chat layer builds it over its reminder book (a
:class:`ReminderBook` it implements; the harness never sees a thread) and adds it to its
turns' sessions. A reminder is an effect that outlives the turn (a durable job that later
runs a turn in the thread), so the tool is ``external``: denied in every unattended mode
unless the channel's binding lists ``schedule`` in ``tools``, like any other effect. The
book bounds what it makes (reminders per thread, the shortest cron interval) and refuses
more with an error the model reads.
"""

from __future__ import annotations

from typing import Annotated, Literal, Protocol

from pydantic import Field

from geode.tools.base import ToolContext, ToolDef, tool
from geode.tools.errors import ToolFailure

__all__ = ["ReminderBook", "make_schedule"]


class ReminderBook(Protocol):
    """The reminders of the thread a session's running turn answers in (by session id).
    Each method returns the text the model reads, or raises ToolFailure saying why not."""

    async def tool_create(self, session_id: str, when: str, text: str) -> str: ...

    async def tool_list(self, session_id: str) -> str: ...

    async def tool_cancel(self, session_id: str, reminder_id: str) -> str: ...


def make_schedule(book: ReminderBook) -> ToolDef:
    """The ``schedule`` tool over ``book``."""

    @tool(safety="external")
    async def schedule(
        ctx: ToolContext,
        action: Annotated[Literal["create", "list", "cancel"], Field(
            description="create a reminder, list this thread's, or cancel one")],
        when: Annotated[str | None, Field(description=(
            "For create: 'in 10m', 'in 2h', 'in 1d', 'tomorrow 09:00', an ISO-8601 time, "
            "'every day 09:00', 'every weekday 09:00' or 'cron \"0 9 * * 1-5\"' (in the "
            "channel's time zone, UTC unless it sets one)"))] = None,
        text: Annotated[str | None, Field(
            description="For create: what to do then (it runs as a message in this thread)",
        )] = None,
        reminder_id: Annotated[str | None, Field(
            description="For cancel: the reminder's id (list shows them)")] = None,
    ) -> str:
        """Set a reminder in this chat thread: at the time given, the text runs here as a
        new message to you and your answer is posted in the thread. Also lists this thread's
        reminders and cancels one. Times are the channel's (UTC unless it sets a zone)."""
        if action == "create":
            if not when or not text:
                raise ToolFailure("create needs `when` and `text`")
            return await book.tool_create(ctx.session_id, when, text)
        if action == "list":
            return await book.tool_list(ctx.session_id)
        if not reminder_id:
            raise ToolFailure("cancel needs `reminder_id` (list shows them)")
        return await book.tool_cancel(ctx.session_id, reminder_id)

    return schedule
