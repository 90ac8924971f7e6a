"""Discord MESSAGE_CREATE JSON -> :class:`~bots.events.InboundEvent`, defensively.

Works on the raw gateway / REST JSON (the same shape arrives live and from history), not on
discord.py's ``Message``: one malformed payload must not stop the intake, so anything
unexpected becomes ``None`` and the next message is handled as usual.

Threads: a message in a thread belongs to the thread (session root = the thread id, which
for a thread started from a message is that message's id, a Discord invariant); a top-level
message roots its own thread unless it replies to a message the index knows
(reply-in-place mode, where the reply chain is the thread).

Approval buttons: :func:`approval_components` builds a request's action row and
:func:`parse_action` reads a click's ``custom_id`` back (anything else is not ours).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from bots.events import Attachment, InboundEvent

__all__ = [
    "DISCORD_EPOCH_MS",
    "Draft",
    "approval_components",
    "convert_message",
    "message_key",
    "parse_action",
    "snowflake",
    "snowflake_seconds",
]

DISCORD_EPOCH_MS = 1420070400000
#: message types a person writes (DEFAULT, REPLY); system messages are not addressed to us
_USER_TYPES = (0, 19)


@dataclass(frozen=True, kw_only=True)
class Draft:
    """A converted message; ``needs_root``: resolve ``event.reply_to`` through the index."""

    event: InboundEvent
    needs_root: bool


def snowflake(value: Any) -> str | None:
    """The id as a decimal string, or None when ``value`` is not a snowflake."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    text = str(value).strip()
    return text if re.fullmatch(r"\d{1,20}", text) else None


def snowflake_seconds(sid: str | int) -> int:
    """Unix time (seconds) encoded in a snowflake."""
    return ((int(sid) >> 22) + DISCORD_EPOCH_MS) // 1000


def message_key(bot_id: str, message_id: str) -> str:
    return f"discord:{bot_id}:msg:{message_id}"


def _author_name(author: dict[str, Any]) -> str:
    for key in ("global_name", "username"):
        value = author.get(key)
        if isinstance(value, str) and value:
            return value[:200]
    return ""


def _strip_mentions(text: str, bot_id: str) -> tuple[str, bool]:
    pattern = re.compile(rf"<@!?{re.escape(bot_id)}>")
    found = bool(pattern.search(text))
    return re.sub(r"\s{2,}", " ", pattern.sub(" ", text)).strip(), found


def _attachments(data: dict[str, Any]) -> tuple[Attachment, ...]:
    out: list[Attachment] = []
    raw = data.get("attachments")
    for a in raw if isinstance(raw, list) else []:
        if not isinstance(a, dict):
            continue
        size = a.get("size")
        kind, seconds = _audio(a)
        out.append(Attachment(
            name=str(a.get("filename") or "")[:200], mime=str(a.get("content_type") or "")[:100],
            size=size if isinstance(size, int) and not isinstance(size, bool) else 0,
            ref=str(a.get("url") or "")[:500], kind=kind, duration=seconds,
        ))
    return tuple(out)


def _audio(a: dict[str, Any]) -> tuple[str, int]:
    """(kind, declared seconds) of an attachment: a voice message (it carries
    ``duration_secs`` and a ``waveform``) is a voice note, another ``audio/*`` file an audio
    file; both are transcribed within the voice limits, checked on these declared values
    before any download (bots.attachments)."""
    raw = a.get("duration_secs")
    secs = raw if isinstance(raw, int | float) and not isinstance(raw, bool) else 0
    seconds = max(0, math.ceil(secs)) if math.isfinite(secs) else 2**31  # never under a limit
    if "duration_secs" in a or "waveform" in a:
        return "voice", seconds
    if str(a.get("content_type") or "").lower().startswith("audio/"):
        return "audio", seconds
    return "", 0


def convert_message(
    data: Any, *, bot_id: str, parent_id: str | None, thread_id: str | None = None
) -> Draft | None:
    """One MESSAGE_CREATE payload as a draft event, or None (not a person's message).

    Args:
        data: the payload.
        bot_id: the bot's user id (mention detection).
        parent_id: the channel a thread belongs to, when ``data`` is in a thread.
        thread_id: the thread's id (defaults to the payload's ``channel_id``).
    """
    if not isinstance(data, dict):
        return None
    mid = snowflake(data.get("id"))
    cid = snowflake(data.get("channel_id"))
    author = data.get("author")
    if mid is None or cid is None or not isinstance(author, dict):
        return None
    sender = snowflake(author.get("id"))
    kind = data.get("type", 0)
    if sender is None or kind not in _USER_TYPES or isinstance(kind, bool):
        return None
    content = data.get("content")
    text, mentioned = _strip_mentions(content if isinstance(content, str) else "", bot_id)
    mentions = data.get("mentions")
    if isinstance(mentions, list):
        mentioned = mentioned or any(isinstance(m, dict) and str(m.get("id")) == bot_id
                                     for m in mentions)
    ref = data.get("message_reference")
    reply_to = snowflake(ref.get("message_id")) if isinstance(ref, dict) else None
    referenced = data.get("referenced_message")
    reply_to_bot = bool(
        isinstance(referenced, dict) and isinstance(referenced.get("author"), dict)
        and str(referenced["author"].get("id")) == bot_id
    )
    guild = snowflake(data.get("guild_id"))
    in_thread = parent_id is not None
    extra: dict[str, Any] = {"guild": guild}
    if in_thread:
        root = thread_id or cid
        extra["thread_id"] = root
        channel = parent_id
    else:
        root = mid
        channel = cid
        # A top-level message roots a new thread (created on it when the bot answers);
        # a reply may continue a reply chain instead (resolved by the connector).
        extra["start_thread"] = True
        extra["title"] = (text or "GEODE")[:90]
    event = InboundEvent(
        platform="discord", workspace=bot_id, channel=str(channel), thread_root=root,
        message_id=mid, sender=sender, dedupe_key=message_key(bot_id, mid), text=text,
        sender_name=_author_name(author),
        sender_is_bot=bool(author.get("bot")) or data.get("webhook_id") is not None,
        mentions_bot=mentioned, reply_to=reply_to, reply_to_bot=reply_to_bot,
        is_dm=guild is None, date=snowflake_seconds(mid), attachments=_attachments(data),
        extra=extra,
    )
    return Draft(event=event, needs_root=not in_thread and reply_to is not None)


#: ``custom_id`` of the approval buttons (``bots.approvals``): ``geode:approve:K7Q2XM``
_ACTION = re.compile(r"^geode:(approve|deny):([A-Z0-9]{4,16})$")
_BUTTON = 2  # component type
_SUCCESS, _DANGER = 3, 4  # button styles: green, red


def approval_components(short_id: str) -> list[dict[str, Any]]:
    """The action row of an approval request: Approve (green) and Deny (red)."""
    return [{"type": 1, "components": [
        {"type": _BUTTON, "style": _SUCCESS, "label": "Approve",
         "custom_id": f"geode:approve:{short_id}", "emoji": {"name": "✅"}},
        {"type": _BUTTON, "style": _DANGER, "label": "Deny",
         "custom_id": f"geode:deny:{short_id}", "emoji": {"name": "🚫"}},
    ]}]


def parse_action(data: Any) -> tuple[str, str] | None:
    """(``approve`` | ``deny``, short id) of a MESSAGE_COMPONENT interaction's ``data`` when
    it is a click on one of our approval buttons; None for anything else."""
    if not isinstance(data, dict) or data.get("component_type") != _BUTTON:
        return None
    custom_id = data.get("custom_id")
    m = _ACTION.match(custom_id) if isinstance(custom_id, str) else None
    return None if m is None else (m.group(1), m.group(2))
