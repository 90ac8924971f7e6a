"""Thread context for the first mention inside an existing Discord thread.

When the bot is first mentioned in a thread it has not seen (its earlier messages were
posted before the bot was bound, or while it was away beyond catch-up), the thread's earlier
messages come from the channel history API (``GET /channels/{thread}/messages?before=``),
plus the message the thread was started from (it lives in the parent channel, with the
thread's id). As far as the API and the bot's permissions allow: a 403 / 404 is context
missing, not an error of the turn.
"""

from __future__ import annotations

from typing import Any

import discord
import structlog

from bots.discord._convert import convert_message, snowflake
from bots.events import InboundEvent

__all__ = ["fetch_thread_history"]

log = structlog.get_logger(__name__)

_PAGE = 100


async def fetch_thread_history(
    http: discord.http.HTTPClient, event: InboundEvent, *, bot_id: str, max_messages: int
) -> list[InboundEvent]:
    """The up to ``max_messages`` messages of ``event``'s thread before it, oldest first.

    Returns [] when ``event`` is not in a thread. The bot's own messages are left out (it
    has not seen this thread, so there are none it would not know).
    """
    thread = snowflake(event.extra.get("thread_id"))
    before = snowflake(event.message_id)
    if thread is None or before is None or max_messages <= 0:
        return []
    raw: list[dict[str, Any]] = []
    cursor = int(before)
    while len(raw) < max_messages:
        try:
            page = await http.logs_from(int(thread), _PAGE, before=cursor)
        except discord.HTTPException as exc:
            log.info("discord.thread_history_unavailable", thread=thread, error=str(exc))
            break
        items: list[dict[str, Any]] = [dict(m) for m in page
                                       if isinstance(m, dict) and snowflake(m.get("id"))]
        raw.extend(items)
        if len(page) < _PAGE or not items:
            break
        cursor = min(int(m["id"]) for m in items)
    raw = sorted(raw, key=lambda m: int(m["id"]))[-max_messages:]
    if len(raw) < max_messages and not any(m["id"] == thread for m in raw):
        try:  # the thread was started from a message of the parent channel (its id)
            starter = dict(await http.get_message(int(event.channel), int(thread)))
            raw.insert(0, starter)
        except discord.HTTPException:
            pass  # started without a message, or it was deleted
    found: list[InboundEvent] = []
    for data in raw:
        in_parent = str(data.get("channel_id")) == event.channel  # the starter message
        draft = convert_message(data, bot_id=bot_id,
                                parent_id=None if in_parent else event.channel)
        if draft is None or draft.event.sender == bot_id:
            continue
        found.append(draft.event)
    return found
