"""Telegram update JSON -> :class:`~bots.events.InboundEvent`, defensively.

Works on the raw JSON (not PTB's ``Update.de_json``): one malformed update must not make
a whole ``getUpdates`` batch unparseable, so each update is checked on its own and
anything unexpected becomes ``None`` (recorded as ignored; the offset still advances).

Threads: a forum topic is a thread (``message_thread_id``); in other groups a reply chain
is a thread (resolved by the connector through the message index); a private chat is one
thread (``dm``) until ``/new``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bots.events import Attachment, InboundEvent

__all__ = ["Draft", "convert_update", "update_key"]

DM_THREAD = "dm"


@dataclass(frozen=True, kw_only=True)
class Draft:
    """A converted event whose thread root may still need the reply chain resolved."""

    event: InboundEvent
    needs_root: bool  # thread_root is provisional: resolve ``event.reply_to`` via the index


def update_key(bot_id: str, update: Any) -> str:
    uid = update.get("update_id") if isinstance(update, dict) else None
    return f"telegram:{bot_id}:update:{uid!s:.40}"


def _int_str(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    text = str(value).strip()
    return text if re.fullmatch(r"-?\d{1,20}", text) else None


def _utf16_slice(text: str, offset: int, length: int) -> str:
    raw = text.encode("utf-16-le")
    return raw[2 * offset: 2 * (offset + length)].decode("utf-16-le", errors="ignore")


def _name(user: dict[str, Any]) -> str:
    parts = [user.get("first_name"), user.get("last_name")]
    name = " ".join(p for p in parts if isinstance(p, str) and p)
    if not name and isinstance(user.get("username"), str):
        name = user["username"]
    return name[:200]


def _attachments(msg: dict[str, Any]) -> tuple[Attachment, ...]:
    out: list[Attachment] = []
    for kind in ("document", "audio", "voice", "video", "animation"):
        f = msg.get(kind)
        if isinstance(f, dict) and isinstance(f.get("file_id"), str):
            out.append(Attachment(
                name=str(f.get("file_name") or kind)[:200],
                mime=str(f.get("mime_type") or "")[:100],
                size=f["file_size"] if isinstance(f.get("file_size"), int) else 0,
                ref=f["file_id"][:300],
            ))
    photos = msg.get("photo")
    if isinstance(photos, list):
        sized = [p for p in photos if isinstance(p, dict) and isinstance(p.get("file_id"), str)]
        if sized:
            best = max(sized, key=_size)
            out.append(Attachment(name="photo", mime="image/jpeg",
                                  size=best.get("file_size") or 0, ref=best["file_id"][:300]))
    return tuple(out)


def _size(photo: dict[str, Any]) -> int:
    size = photo.get("file_size")
    return size if isinstance(size, int) else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _mentions(text: str, entities: Any, bot_id: str, username: str) -> bool:
    handle = "@" + username.lower()
    if isinstance(entities, list):
        for e in entities:
            if not isinstance(e, dict):
                continue
            off, ln = e.get("offset"), e.get("length")
            if not isinstance(off, int) or not isinstance(ln, int) or off < 0 or ln < 0:
                continue
            kind = e.get("type")
            if kind == "mention" and _utf16_slice(text, off, ln).lower() == handle:
                return True
            if kind == "text_mention":
                user = e.get("user")
                if isinstance(user, dict) and _int_str(user.get("id")) == bot_id:
                    return True
            if kind == "bot_command" and _utf16_slice(text, off, ln).lower().endswith(handle):
                return True
    return bool(username) and re.search(re.escape(handle) + r"\b", text.lower()) is not None


#: ``callback_data`` of the approval buttons (``bots.approvals``): ``geode:approve:K7Q2XM``
_ACTION = re.compile(r"^geode:(approve|deny):([A-Z0-9]{4,16})$")


def approval_keyboard(short_id: str) -> dict[str, Any]:
    """The inline keyboard of an approval request: Approve / Deny."""
    return {"inline_keyboard": [[
        {"text": "✅ Approve", "callback_data": f"geode:approve:{short_id}"},
        {"text": "🚫 Deny", "callback_data": f"geode:deny:{short_id}"},
    ]]}


def _convert_click(cbq: dict[str, Any], *, bot_id: str) -> Draft | None:
    """A click on an approval button, as the ``/approve ID`` / ``/deny ID`` command of the
    user who clicked (in the request message's thread). Its dedupe key is the callback query's
    id: a redelivered update is recorded once; a second click is a second command (answered
    "already …")."""
    data, msg, qid = cbq.get("data"), cbq.get("message"), cbq.get("id")
    m = _ACTION.match(data) if isinstance(data, str) else None
    user = _dict(cbq.get("from"))
    sender = _int_str(user.get("id"))
    if m is None or not isinstance(msg, dict) or sender is None or not isinstance(qid, str):
        return None
    chat = _dict(msg.get("chat"))
    chat_id, mid = _int_str(chat.get("id")), _int_str(msg.get("message_id"))
    if chat_id is None or mid is None:
        return None
    chat_type = chat.get("type") if isinstance(chat.get("type"), str) else ""
    extra: dict[str, Any] = {"chat_type": chat_type, "action": "button",
                             "callback_query_id": qid}
    topic = _int_str(msg.get("message_thread_id")) if msg.get("is_topic_message") else None
    needs_root = False
    if topic is not None:
        root = topic
        extra["message_thread_id"] = int(topic)
    elif chat_type == "private":
        root = DM_THREAD
    else:
        root, needs_root = mid, True  # the request message's thread, through the index
    event = InboundEvent(
        platform="telegram", workspace=bot_id, channel=chat_id, thread_root=root,
        message_id=mid, sender=sender, dedupe_key=f"telegram:{bot_id}:cbq:{qid}",
        text=f"/{m.group(1)} {m.group(2)}", sender_name=_name(user),
        sender_is_bot=bool(user.get("is_bot") is True), mentions_bot=True, reply_to=mid,
        reply_to_bot=True, is_dm=chat_type == "private", extra=extra,
    )
    return Draft(event=event, needs_root=needs_root)


def convert_update(  # noqa: C901 - one flat pass over a defensive JSON walk
    update: Any, *, bot_id: str, username: str
) -> Draft | None:
    """The event in ``update``, or None if it carries nothing we act on (or is malformed)."""
    if not isinstance(update, dict):
        return None
    if isinstance(update.get("callback_query"), dict):
        return _convert_click(update["callback_query"], bot_id=bot_id)
    is_edit = False
    msg = update.get("message")
    if msg is None and isinstance(update.get("edited_message"), dict):
        msg, is_edit = update["edited_message"], True
    if not isinstance(msg, dict):
        return None
    chat = msg.get("chat")
    mid = _int_str(msg.get("message_id"))
    if not isinstance(chat, dict) or mid is None:
        return None
    chat_id = _int_str(chat.get("id"))
    if chat_id is None:
        return None
    user = _dict(msg.get("from"))
    sender = _int_str(user.get("id"))
    sender_chat = msg.get("sender_chat")
    sid = _int_str(sender_chat.get("id")) if isinstance(sender_chat, dict) else None
    if sid is not None:
        # sent as a chat (a channel, an anonymous admin): "from" is then a placeholder
        # shared by every such chat (Channel_Bot, GroupAnonymousBot), never a person; the
        # chat is the sender, and it is never offered a pairing code (bots.senders)
        sender = f"chat{sid}"
    if sender is None:
        return None
    raw_text = msg.get("text") if isinstance(msg.get("text"), str) else msg.get("caption")
    text = raw_text if isinstance(raw_text, str) else ""
    entities = msg.get("entities") if "text" in msg else msg.get("caption_entities")
    mentioned = _mentions(text, entities, bot_id, username)
    if username:
        text = re.sub(r"(?i)(?<!\w)@" + re.escape(username) + r"\b", "", text).strip()
    reply = msg.get("reply_to_message")
    reply_to = _int_str(reply.get("message_id")) if isinstance(reply, dict) else None
    reply_to_bot = False
    context: tuple[str, ...] = ()
    if isinstance(reply, dict) and reply_to is not None:
        ruser = _dict(reply.get("from"))
        reply_to_bot = _int_str(ruser.get("id")) == bot_id
        rtext = reply.get("text") if isinstance(reply.get("text"), str) else reply.get("caption")
        if isinstance(rtext, str) and rtext.strip():
            context = (f"{_name(ruser) or 'someone'}: {rtext[:4000]}",)
    chat_type = chat.get("type") if isinstance(chat.get("type"), str) else ""
    extra: dict[str, Any] = {"chat_type": chat_type}
    if sid is not None:
        extra["sender_chat"] = sid
    topic = _int_str(msg.get("message_thread_id")) if msg.get("is_topic_message") else None
    needs_root = False
    if topic is not None:
        root = topic
        extra["message_thread_id"] = int(topic)
        if reply_to == topic:  # the topic's service message: not a real reply
            reply_to, reply_to_bot, context = None, False, ()
    elif chat_type == "private":
        root = DM_THREAD
    elif reply_to is not None:
        root, needs_root = reply_to, True
    else:
        root = mid
    date = msg.get("edit_date") if is_edit else msg.get("date")
    key = f"telegram:{bot_id}:{chat_id}:{mid}"
    if is_edit:
        key += f":edit:{_int_str(msg.get('edit_date')) or update.get('update_id')}"
    event = InboundEvent(
        platform="telegram", workspace=bot_id, channel=chat_id, thread_root=root,
        message_id=mid, sender=sender, dedupe_key=key, text=text[:20000],
        sender_name=_name(user), sender_is_bot=bool(user.get("is_bot") is True),
        mentions_bot=mentioned, reply_to=reply_to, reply_to_bot=reply_to_bot,
        is_edit=is_edit, is_dm=chat_type == "private",
        date=date if isinstance(date, int) and not isinstance(date, bool) else 0,
        attachments=_attachments(msg), context=context, extra=extra,
    )
    return Draft(event=event, needs_root=needs_root)
