"""Slack payloads -> :class:`InboundEvent` (events, history messages, slash commands).

One post is one event whatever way it arrives: the ``message`` event, the ``app_mention``
event for the same post, a redelivery (same ``event_id``), and the copy found later by
``conversations.history`` all map to the dedupe key ``slack:<team>:<channel>:<ts>``, so the
store's unique key keeps exactly one of them.

Everything here is total over arbitrary JSON: a payload that is not a usable message gives
``None`` (the intake records a marker and acknowledges it), never an exception.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, TypeGuard

from bots.events import Attachment, InboundEvent

__all__ = [
    "COMMAND_NAMES",
    "SlashCommand",
    "command_event",
    "convert_message",
    "event_marker",
    "parse_slash",
    "valid_ts",
]

_TS = re.compile(r"^\d{1,12}\.\d{1,9}$")
_PERMALINK_TS = re.compile(r"/p(\d{10})(\d{6})(?:\D|$)")
_QUERY_TS = re.compile(r"thread_ts=(\d{1,12}\.\d{1,9})")
#: subtypes that are a person's (or a bot's) message; others (joins, deletes, topic) are not
_MESSAGE_SUBTYPES = {None, "thread_broadcast", "file_share", "me_message", "bot_message"}
COMMAND_NAMES = ("new", "reset", "status", "stop", "help", "approve", "deny", "model", "usage",
                 "remind", "reminders")
#: subcommands whose first argument is theirs (a request's short id), not a thread
_ARG_COMMANDS = ("approve", "deny")
#: commands whose words after the name are their text (``/geode remind in 10m check it``);
#: a thread link or ts may still end it
_TEXT_COMMANDS = ("model", "usage", "remind", "reminders")


def valid_ts(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and _TS.match(value) is not None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _audio(f: dict[str, Any]) -> tuple[str, int]:
    """(kind, declared seconds) of a file: an audio clip recorded in Slack (subtype
    ``slack_audio``, its length in ``duration_ms``) is a voice note, another ``audio/*``
    upload an audio file; both are transcribed within the voice limits, checked on these
    declared values before any download (bots.attachments)."""
    seconds = -(-_int(f.get("duration_ms")) // 1000)  # rounded up: never under the limit
    if f.get("subtype") == "slack_audio":
        return "voice", seconds
    if _str(f.get("mimetype")).lower().startswith("audio/"):
        return "audio", seconds
    return "", 0


def _files(value: Any) -> tuple[Attachment, ...]:
    if not isinstance(value, list):
        return ()
    out: list[Attachment] = []
    for f in value[:20]:
        if not isinstance(f, dict):
            continue
        kind, seconds = _audio(f)
        out.append(Attachment(
            name=_str(f.get("name"))[:200], mime=_str(f.get("mimetype"))[:100],
            size=_int(f.get("size")), ref=_str(f.get("id"))[:100], kind=kind,
            duration=seconds,
        ))
    return tuple(out)


def convert_message(
    event: Any, *, team: str, bot_user_id: str, bot_id: str, channel: str | None = None
) -> InboundEvent | None:
    """A ``message`` / ``app_mention`` event (or a history message, given ``channel``).

    Returns None for anything that is not a message to consider (deletes, joins, malformed).
    Edits (``message_changed``) become ``is_edit`` events, which the layer ignores.
    """
    if not isinstance(event, dict):
        return None
    kind = event.get("type", "message")
    if kind not in ("message", "app_mention"):
        return None
    channel = channel or _str(event.get("channel"))
    if not channel or len(channel) > 100:
        return None
    subtype = event.get("subtype")
    edit_of: str | None = None
    if subtype == "message_changed":
        inner = event.get("message")
        if not isinstance(inner, dict) or not valid_ts(event.get("event_ts") or event.get("ts")):
            return None
        edit_of = _str(event.get("event_ts") or event.get("ts"))
        event, subtype = inner, inner.get("subtype")
    if subtype not in _MESSAGE_SUBTYPES:
        return None
    ts = event.get("ts")
    if not valid_ts(ts):
        return None
    thread_ts = event.get("thread_ts")
    root = thread_ts if valid_ts(thread_ts) else ts
    msg_bot_id = _str(event.get("bot_id"))
    user = _str(event.get("user"))[:100]
    own = (bool(bot_user_id) and user == bot_user_id) or (bool(bot_id) and msg_bot_id == bot_id)
    sender = bot_user_id if own else (user or msg_bot_id[:100])
    if not sender:
        return None
    raw_text = _str(event.get("text"))[:40_000]
    mention = f"<@{bot_user_id}>" if bot_user_id else None
    mentions_bot = kind == "app_mention" or (mention is not None and mention in raw_text)
    text = raw_text.replace(mention, " ").strip() if mention else raw_text.strip()
    profile = event.get("user_profile")
    name = ""
    if isinstance(profile, dict):
        name = _str(profile.get("display_name")) or _str(profile.get("real_name"))
    key = f"slack:{team}:{channel}:{ts}" + (f":edit:{edit_of}" if edit_of else "")
    channel_type = _str(event.get("channel_type"))
    return InboundEvent(
        platform="slack", workspace=team, channel=channel, thread_root=root, message_id=ts,
        sender=sender, dedupe_key=key, text=text, sender_name=name[:200],
        sender_is_bot=own or bool(msg_bot_id) or subtype == "bot_message",
        mentions_bot=mentions_bot, reply_to=root if root != ts else None,
        is_edit=edit_of is not None, is_dm=channel_type == "im" or channel.startswith("D"),
        date=int(float(ts)), attachments=_files(event.get("files")),
        # who a streamed answer is for (chat.startStream names its recipient in channels)
        extra={"user": sender, "team": _str(event.get("user_team")) or team},
    )


def event_marker(body: Any, *, team: str) -> InboundEvent:
    """A recorded stand-in for an event we do not act on (its id deduplicates retries)."""
    event_id = _str(body.get("event_id")) if isinstance(body, dict) else ""
    inner = body.get("event") if isinstance(body, dict) else None
    kind = _str(inner.get("type"))[:40] if isinstance(inner, dict) else ""
    key = f"slack:{team}:event:{event_id[:100]}" if event_id else ""
    return InboundEvent(platform="slack", workspace=team, channel="", thread_root="",
                        message_id="", sender="", dedupe_key=key, extra={"kind": kind})


@dataclass(frozen=True, kw_only=True)
class SlashCommand:
    """``/geode <name> [thread]`` as parsed from a slash-command payload."""

    name: str
    channel: str
    user: str
    user_name: str
    trigger_id: str
    thread: str | None
    #: ``approve`` / ``deny``: the request's short id ("" = the one waiting in the channel)
    arg: str = ""


def parse_slash(body: Any) -> SlashCommand | None:
    """The subcommand and its optional thread (a ts or a message link); None if malformed."""
    if not isinstance(body, dict):
        return None
    channel, user = _str(body.get("channel_id")), _str(body.get("user_id"))
    if not channel or not user:
        return None
    words = _str(body.get("text")).split()
    name = words[0].lower().lstrip("/") if words else "help"
    arg = ""
    if name in _TEXT_COMMANDS:
        return _text_command(body, name, words[1:], channel=channel, user=user)
    if name in _ARG_COMMANDS and len(words) > 1 and re.fullmatch(r"[A-Za-z0-9]{4,16}", words[1]):
        arg, words = words[1].upper(), words[:1] + words[2:]
    thread: str | None = None
    for word in words[1:2]:
        thread = _thread_word(word)
    if name in _ARG_COMMANDS and not arg and thread is None and len(words) > 1:
        # neither an id nor a thread: kept, so that the command refuses it (`/geode approve
        # %` must never decide the channel's pending request as a bare /approve would)
        arg = words[1][:40]
    trigger = _str(body.get("trigger_id")) or f"{channel}:{user}:{time.time_ns()}"
    return SlashCommand(name=name, channel=channel[:100], user=user[:100],
                        user_name=_str(body.get("user_name"))[:200], trigger_id=trigger[:90],
                        thread=thread, arg=arg)


def _thread_word(word: str) -> str | None:
    """The thread a word names (a ts or a message link), or None."""
    word = word.strip("<>").split("|")[0]
    if valid_ts(word):
        return word
    if (m := _QUERY_TS.search(word)) is not None:
        return m.group(1)
    if (m := _PERMALINK_TS.search(word)) is not None:
        return f"{m.group(1)}.{m.group(2)}"
    return None


def _text_command(body: dict[str, Any], name: str, rest: list[str], *, channel: str,
                  user: str) -> SlashCommand:
    """``/geode model ID``, ``/geode remind WHEN WHAT``, ``/geode reminders cancel ID``: the
    words after the name are the command's text, a last word naming a thread aside."""
    thread = _thread_word(rest[-1]) if rest else None
    if thread is not None:
        rest = rest[:-1]
    trigger = _str(body.get("trigger_id")) or f"{channel}:{user}:{time.time_ns()}"
    return SlashCommand(name=name, channel=channel[:100], user=user[:100],
                        user_name=_str(body.get("user_name"))[:200], trigger_id=trigger[:90],
                        thread=thread, arg=" ".join(rest)[:2000])


def command_event(cmd: SlashCommand, *, team: str, thread_root: str) -> InboundEvent:
    """The command as a message ``/<name>`` in ``thread_root`` (the layer runs it there)."""
    return InboundEvent(
        platform="slack", workspace=team, channel=cmd.channel, thread_root=thread_root,
        message_id=f"cmd:{cmd.trigger_id}", sender=cmd.user,
        dedupe_key=f"slack:{team}:cmd:{cmd.trigger_id}",
        text=f"/{cmd.name} {cmd.arg}" if cmd.arg else f"/{cmd.name}",
        sender_name=cmd.user_name, mentions_bot=True, date=int(time.time()),
        is_dm=cmd.channel.startswith("D"),
    )
