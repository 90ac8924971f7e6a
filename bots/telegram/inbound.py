"""Telegram's inbound half: updates turned into neutral events and recorded before they are
confirmed, by long polling (the offset moves in the same transaction as the events) or by
the webhook (answered 200 only after the record). See :mod:`bots.telegram.connector`.

The conversion (:func:`convert_update`) works on the raw JSON (not PTB's
``Update.de_json``): one malformed update must not make a whole ``getUpdates`` batch
unparseable, so each update is checked on its own and anything unexpected becomes ``None``
(recorded as ignored; the offset still advances).

Threads: a forum topic is a thread (``message_thread_id``); in other groups a reply chain
is a thread (resolved through the message index, :meth:`TelegramInbound._convert_batch`); a
private chat is one thread (``dm``) until ``/new``.
"""

from __future__ import annotations

import asyncio
import hmac
import random
import re
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web
from telegram.error import Conflict, NetworkError, RetryAfter, TimedOut

from bots.connector import BaseConnector
from bots.events import Attachment, InboundEvent
from bots.telegram.client import APPROVAL_ACTION, _Bot, retry_after_seconds
from bots.telegram.options import TelegramOptions
from geode.errors import ConfigError

__all__ = ["ALLOWED_UPDATES", "Draft", "TelegramInbound", "convert_update", "update_key"]

log = structlog.get_logger(__name__)

ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]


# -- updates -> events ----------------------------------------------------------------------

#: the one thread of a private chat (until ``/new``)
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
                kind=kind,
                duration=f["duration"] if isinstance(f.get("duration"), int) else 0,
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


def _convert_click(cbq: dict[str, Any], *, bot_id: str) -> Draft | None:
    """A click on an approval button, as the ``/approve ID`` / ``/deny ID`` command of the
    user who clicked (in the request message's thread). Its dedupe key is the callback query's
    id: a redelivered update is recorded once; a second click is a second command (answered
    "already …")."""
    data, msg, qid = cbq.get("data"), cbq.get("message"), cbq.get("id")
    m = APPROVAL_ACTION.match(data) if isinstance(data, str) else None
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
        # chat is the sender, and it is never offered a pairing code (bots.router.SenderPolicy)
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


# -- the intake ------------------------------------------------------------------------------


class TelegramInbound(BaseConnector):
    """The intake of :class:`~bots.telegram.connector.TelegramConnector`: what it reads is
    set up by the connector's ``__init__`` and ``connect``."""

    opts: TelegramOptions
    bot: _Bot | None
    bot_id: str
    username: str
    webhook_secret: str | None
    #: answered ``getUpdates`` calls
    polls: int
    _web: web.AppRunner | None

    @property
    def cursor_name(self) -> str:
        return f"telegram:{self.bot_id}:offset"

    # -- polling --------------------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        assert self.bot is not None and self.layer is not None
        saved = await self.intake.cursors.get(self.cursor_name)
        offset = int(saved) if saved is not None else None
        failures = 0
        while True:
            try:
                updates = await self.bot.get_raw_updates(
                    offset=offset, poll_s=self.opts.poll_timeout_s, limit=self.opts.poll_limit,
                    allowed=ALLOWED_UPDATES,
                )
                failures = 0
            except RetryAfter as exc:
                await asyncio.sleep(retry_after_seconds(exc))
                continue
            except (Conflict, TimedOut, NetworkError) as exc:
                failures += 1
                delay = min(30.0, 0.1 * 2 ** min(failures, 9)) * (0.5 + random.random())
                log.warning("telegram.poll_failed", error_class=type(exc).__name__,
                            error=str(exc), retry_in=round(delay, 2))
                if failures > 1:  # one failed poll is a blip; a second says it is down
                    self.intake_health.down(f"getUpdates failing ({type(exc).__name__}: "
                                            f"{exc}); retrying in {delay:.1f}s")
                await asyncio.sleep(delay)
                continue
            self.polls += 1
            health = self.intake_health
            if health.state == "up" and health.detail == "polling":
                health.last_beat = health.clock()  # a poll, as data (no call per poll)
            else:
                health.beat("polling")  # up (again), or polling after catching up
            if not updates:
                continue
            offset = await self.ingest(updates, offset)

    async def ingest(self, updates: list[Any], offset: int | None) -> int | None:
        """Convert and record one batch; returns the next offset (after the durable record)."""
        events = await self._convert_batch(updates)
        ids = [u["update_id"] for u in updates
               if isinstance(u, dict) and isinstance(u.get("update_id"), int)
               and not isinstance(u.get("update_id"), bool)]
        next_offset = max(ids) + 1 if ids else offset
        cursor = (self.cursor_name, str(next_offset)) if next_offset is not None else None
        # Recorded with the new offset in one transaction, before the next getUpdates
        # confirms the batch to Telegram.
        await self.intake.submit(events, cursor=cursor)
        return next_offset

    async def _convert_batch(self, updates: list[Any]) -> list[tuple[InboundEvent, str]]:
        assert self.layer is not None
        events: list[tuple[InboundEvent, str]] = []
        roots: dict[tuple[str, str], str] = {}  # this batch's messages, not yet in the index
        for u in updates:
            try:
                draft = convert_update(u, bot_id=self.bot_id, username=self.username)
            except Exception:  # a converter bug must not stop the intake
                log.warning("telegram.convert_failed", exc_info=True)
                draft = None
            if draft is None:
                events.append((self._marker(u), "ignored"))
                continue
            ev = draft.event
            if draft.needs_root and ev.reply_to is not None:
                root = roots.get((ev.channel, ev.reply_to)) or await self.intake.thread_of(
                    ev.platform, ev.workspace, ev.channel, ev.reply_to)
                ev = ev.with_thread(root or ev.reply_to)
            roots[(ev.channel, ev.message_id)] = ev.thread_root
            events.append((ev, "received"))
        return events

    def _marker(self, update: Any) -> InboundEvent:
        kinds = sorted(k for k in update if k != "update_id")[:5] if isinstance(update,
                                                                                dict) else []
        return InboundEvent(platform="telegram", workspace=self.bot_id, channel="",
                            thread_root="", message_id="", sender="",
                            dedupe_key=update_key(self.bot_id, update),
                            extra={"kinds": [str(k)[:40] for k in kinds]})

    # -- webhook --------------------------------------------------------------------------------

    async def _start_webhook(self) -> None:
        o = self.opts
        if not o.webhook_url:
            raise ConfigError("[channels.telegram] mode = \"webhook\" needs webhook_url "
                              "(the public HTTPS URL Telegram posts to).")
        if not self.webhook_secret:
            raise ConfigError(f"webhook mode needs a secret: set ${o.webhook_secret_env} "
                              "(1-256 characters A-Z a-z 0-9 _ -).")
        app = web.Application()
        app.router.add_post(o.webhook_path, self._on_webhook)
        self._web = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._web.setup()
        site = web.TCPSite(self._web, o.webhook_listen, o.webhook_port)
        await site.start()
        if o.webhook_port == 0:
            server = getattr(site, "_server", None)
            sockets = getattr(server, "sockets", None) or []
            if sockets:
                self.webhook_port = int(sockets[0].getsockname()[1])
        else:
            self.webhook_port = o.webhook_port
        assert self.bot is not None
        await self.bot.set_webhook(url=o.webhook_url, secret_token=self.webhook_secret,
                                   allowed_updates=ALLOWED_UPDATES)

    webhook_port: int = 0

    async def _on_webhook(self, request: web.Request) -> web.Response:
        got = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not self.webhook_secret or not hmac.compare_digest(got.encode(),
                                                              self.webhook_secret.encode()):
            log.warning("telegram.webhook_bad_secret", remote=request.remote)
            return web.Response(status=401, text="bad secret token")
        try:
            body = await request.json()
        except ValueError:
            body = None
        try:
            events = await self._convert_batch([body])
            await self.intake.submit(events)
        except Exception:
            log.exception("telegram.webhook_record_failed")
            return web.Response(status=500, text="not recorded; retry")
        return web.Response(status=200, text="ok")
