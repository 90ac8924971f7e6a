"""A wire-level fake of the Telegram Bot API, for tests and offline demos.

What is simulated: one bot (``getMe``) and the chats it is in, served over real HTTP on
127.0.0.1 so the real python-telegram-bot (or any client) talks to it unchanged:

- ``getUpdates`` with ``offset`` (updates below the offset are confirmed and dropped for good),
  negative offsets, ``limit`` and long-poll ``timeout`` (answers early when an update arrives).
  A second ``getUpdates`` arriving while one is in flight ends the earlier one with
  409 "Conflict: terminated by other getUpdates request", and ``getUpdates`` while a webhook
  is set is 409 too, as on Telegram.
- ``sendMessage`` (HTML ``parse_mode`` validated like Telegram: malformed markup is 400
  "can't parse entities"; MarkdownV2/Markdown are accepted unchecked), ``editMessageText``
  ("message is not modified" when nothing changed), ``deleteMessage``, ``setMessageReaction``,
  ``sendChatAction``, ``getFile`` (+ file download under :attr:`base_file_url`), ``getChat``,
  ``getChatMember``, ``setWebhook`` / ``deleteWebhook`` / ``getWebhookInfo``, ``sendDocument`` /
  ``sendPhoto`` with a multipart file (50 MB / 10 MB, recorded with their bytes in
  :attr:`~FakeTelegramServer.uploads`; the file is then served by ``getFile``;
  :meth:`~FakeTelegramServer.hold_upload_answers` lets one take effect while its answer
  waits). Replies via ``reply_parameters`` or ``reply_to_message_id``; forum topics via
  ``message_thread_id``.
- While a webhook is set, queued updates are POSTed to it (header
  ``X-Telegram-Bot-Api-Secret-Token``) in order; a non-2xx answer is retried, like Telegram.
- Request bodies are accepted as JSON, form-encoded (what PTB sends: each value JSON-encoded
  except plain strings) or multipart.

How to script it::

    async with FakeTelegramServer(token="123:ABC", bot_username="geode_bot") as srv:
        app = ApplicationBuilder().token("123:ABC").base_url(srv.base_url).build()
        ...
        srv.user_says(-100123, "@geode_bot hi", from_user=42, message_thread_id=7)
        await srv.wait_until(lambda: srv.sent)
        srv.fail_next("sendMessage", status=429, retry_after=1, chat_id=-100123)

Records: :attr:`~FakeTelegramServer.calls` (every method call with decoded params and the HTTP
status answered), :attr:`~FakeTelegramServer.sent` (sendMessage / editMessageText that took
effect), :meth:`~FakeTelegramServer.messages_in` (the visible chat after edits and deletes).

Flood control, off unless asked: ``flood_per_s`` (messages shown per second, the whole bot)
and ``group_limit`` / ``group_period_s`` (messages shown in one group per period: Telegram's
20 a minute, edits included); over either budget a call answers 429 with ``retry_after``,
counted in :attr:`~FakeTelegramServer.flooded`. Any other 429 is injected with
:meth:`~FakeTelegramServer.fail_next`.

Not simulated: MarkdownV2 validation, media other than documents and photos, inline mode,
payments. Error descriptions follow the Bot API's wording where known; a few are approximations.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from bots.testing._fakebase import Fault, RoutedFake, route
from bots.testing._telegram_html import TelegramEntityError, parse_telegram_html, utf16_len
from bots.testing._uploads import UploadHold

log = structlog.get_logger(__name__)

JSONDict = dict[str, Any]
ChatId = int | str

__all__ = [
    "ChatMessage",
    "FakeTelegramServer",
    "SentMessage",
    "TelegramCall",
    "TelegramEntityError",
    "TelegramUpload",
    "parse_telegram_html",
]

# Form values that are plain strings on the wire; every other form value is JSON-encoded by
# PTB (numbers, objects, arrays, booleans), so decoding "123" as text would be wrong only here.
_STRING_PARAMS = frozenset(
    "text caption parse_mode action url secret_token file_id emoji title description name "
    "inline_message_id callback_query_id business_connection_id message_effect_id "
    "ip_address".split()
)
_MAX_TEXT = 4096  # UTF-16 code units of the parsed text, as Telegram counts
DOCUMENT_LIMIT = 50 << 20  # the Bot API's upload limits
PHOTO_LIMIT = 10 << 20


@dataclass(kw_only=True)
class TelegramCall:
    """One Bot API request as the fake saw it."""

    method: str
    params: JSONDict
    status: int = 200
    at: float = field(default_factory=time.monotonic)


@dataclass(kw_only=True)
class SentMessage:
    """A ``sendMessage`` or ``editMessageText`` that took effect (text as the bot sent it)."""

    method: str
    chat_id: ChatId
    message_id: int
    text: str
    plain_text: str
    parse_mode: str | None = None
    message_thread_id: int | None = None
    reply_to_message_id: int | None = None
    reply_markup: Any = None


@dataclass(kw_only=True)
class TelegramUpload:
    """A ``sendDocument`` / ``sendPhoto`` / ``sendVoice`` that took effect (the file's bytes
    included)."""

    method: str
    chat_id: ChatId
    message_id: int
    filename: str
    data: bytes
    caption: str | None = None
    message_thread_id: int | None = None
    reply_to_message_id: int | None = None


@dataclass(kw_only=True)
class ChatMessage:
    """A message as it is visible in a chat now (after edits; deleted ones are gone)."""

    chat_id: ChatId
    message_id: int
    from_bot: bool
    user_id: int
    text: str
    plain_text: str
    parse_mode: str | None = None
    message_thread_id: int | None = None
    reply_to_message_id: int | None = None
    date: int = 0
    edits: int = 0
    reactions: list[str] = field(default_factory=list)
    raw: JSONDict = field(default_factory=dict)


class _ApiError(Exception):
    def __init__(self, status: int, description: str, parameters: JSONDict | None = None):
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters


def _bad(description: str) -> _ApiError:
    return _ApiError(400, f"Bad Request: {description}")




class FakeTelegramServer(RoutedFake, UploadHold):
    """Fake Telegram Bot API for one bot; see the module docstring for what it simulates.

    Args:
        token: the bot token the fake accepts (its numeric prefix is the bot's user id).
        bot_username: the bot's username, without ``@``.
        bot_name: the bot's first name.
        webhook_retry_delay: pause before re-POSTing an update the webhook refused.
    """

    def __init__(
        self,
        *,
        token: str = "123456:TEST-TOKEN",
        bot_username: str = "geode_bot",
        bot_name: str = "Geode",
        webhook_retry_delay: float = 0.05,
        flood_per_s: float = 0.0,
        group_limit: int = 0,
        group_period_s: float = 60.0,
    ) -> None:
        """``flood_per_s``: the Bot API's flood control (off by default): more than this many
        messages sent, edited or drafted per second overall (a bucket that size, refilled at
        that rate) answer 429 with ``retry_after`` 1, counted in :attr:`flooded`.
        ``group_limit``: more than this many messages sent or edited in one group (a chat
        with a negative id) per ``group_period_s`` (a bucket that size, refilled at that
        rate; off when 0) answer 429 with ``retry_after`` the seconds until one is back."""
        super().__init__()
        self.flood_per_s = flood_per_s
        self.flooded = 0
        self._flood_tokens = flood_per_s
        self._flood_at = time.monotonic()
        self.group_limit = group_limit
        self.group_period_s = group_period_s
        #: group -> (tokens left, monotonic time they were counted)
        self._group_tokens: dict[int, tuple[float, float]] = {}
        #: group -> 429s its budget answered
        self.group_flooded: dict[int, int] = {}
        #: sendMessageDraft calls that took effect: (chat id, draft id, plain text)
        self.drafts: list[tuple[ChatId, int, str]] = []
        self.token = token
        self.bot_username = bot_username
        self.bot_id = int(token.split(":", 1)[0])
        self.bot_name = bot_name
        self.webhook_retry_delay = webhook_retry_delay
        self.calls: list[TelegramCall] = []
        #: the command menus ``setMyCommands`` set, by scope type
        self.my_commands: dict[str, list[JSONDict]] = {}
        self.sent: list[SentMessage] = []
        #: sendDocument / sendPhoto that took effect, with the file's bytes
        self.uploads: list[TelegramUpload] = []
        self.deleted: list[tuple[ChatId, int]] = []
        self.chat_actions: list[JSONDict] = []
        self.reactions: list[JSONDict] = []
        self.webhook_deliveries: list[tuple[int, int]] = []  # (update_id, HTTP status or 0)
        self.all_updates: dict[int, JSONDict] = {}
        self.webhook_url: str | None = None
        self.webhook_secret: str | None = None
        self._pending: list[JSONDict] = []
        self._chats: dict[ChatId, JSONDict] = {}
        self._messages: dict[ChatId, dict[int, ChatMessage]] = {}
        self._next_message_id: dict[ChatId, int] = {}
        self._files: dict[str, tuple[str, bytes]] = {}
        #: file paths fetched from the file endpoint, in order
        self.downloads: list[str] = []
        self._update_ids = itertools.count(1000)
        self._query_ids = itertools.count(5_000_000)
        self._poll_generation = 0
        self._closing = False
        self._webhook_task: asyncio.Task[None] | None = None

    @classmethod
    def route_key(cls, name: str) -> str:
        return name.lower()  # the Bot API's method names are case-insensitive

    # ----------------------------------------------------------------- lifecycle
    @property
    def base_url(self) -> str:
        """What PTB takes as ``base_url`` (it appends the token, then ``/method``)."""
        return f"http://127.0.0.1:{self._port}/bot"

    @property
    def base_file_url(self) -> str:
        """What PTB takes as ``base_file_url``."""
        return f"http://127.0.0.1:{self._port}/file/bot"

    async def start(self) -> None:
        """Listen on a random loopback port."""
        await self._serve_routes()
        self._closing = False
        log.debug("fake_telegram.started", port=self._port)

    async def stop(self) -> None:
        """Stop serving; long polls in flight are answered with an empty list."""
        self._closing = True
        self._wake()
        if self._webhook_task is not None:
            self._webhook_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._webhook_task
            self._webhook_task = None
        await self._close()

    # ----------------------------------------------------------------- scripting
    def add_chat(
        self,
        chat_id: ChatId,
        *,
        chat_type: str = "supergroup",
        title: str | None = None,
        is_forum: bool = False,
    ) -> JSONDict:
        """Register a chat the bot is in (``user_says`` does this on first use)."""
        chat: JSONDict = {"id": chat_id, "type": chat_type}
        if chat_type == "private":
            chat["first_name"] = title or f"User{chat_id}"
        else:
            chat["title"] = title or f"Chat {chat_id}"
        if is_forum:
            chat["is_forum"] = True
        self._chats[chat_id] = chat
        self._messages.setdefault(chat_id, {})
        return chat

    def create_topic(
        self, chat_id: ChatId, name: str, *, from_user: int | Mapping[str, Any] = 1
    ) -> int:
        """Open a forum topic; returns its ``message_thread_id`` (the service message's id)."""
        chat = self._chats.get(chat_id) or self.add_chat(chat_id, is_forum=True)
        chat["is_forum"] = True
        msg = self._store_user_message(
            chat_id,
            "",
            from_user=from_user,
            thread_id=None,
            reply_to=None,
            date=None,
            extra={"forum_topic_created": {"name": name, "icon_color": 7322096}},
        )
        msg.message_thread_id = msg.message_id
        msg.raw["message_thread_id"] = msg.message_id
        return msg.message_id

    def user_says(
        self,
        chat_id: ChatId,
        text: str,
        *,
        from_user: int | Mapping[str, Any],
        message_thread_id: int | None = None,
        reply_to: int | None = None,
        chat_type: str = "supergroup",
        entities: Sequence[Mapping[str, Any]] | None = None,
        date: int | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> int:
        """Queue a ``message`` update as if a user wrote ``text`` in the chat.

        ``entities`` defaults to what Telegram would attach: a ``bot_command`` for a leading
        ``/command`` and a ``mention`` for each ``@bot_username``. ``extra`` is merged into the
        message (e.g. ``{"document": {...}}``). Returns the update id.
        """
        if chat_id not in self._chats:
            self.add_chat(chat_id, chat_type=chat_type, is_forum=message_thread_id is not None)
        msg = self._store_user_message(
            chat_id,
            text,
            from_user=from_user,
            thread_id=message_thread_id,
            reply_to=reply_to,
            date=date,
            extra=extra,
            entities=entities,
        )
        return self.push_update({"message": msg.raw})

    def user_edits(self, chat_id: ChatId, message_id: int, text: str) -> int:
        """Queue an ``edited_message`` update for a user's message; returns the update id."""
        msg = self._find(chat_id, message_id)
        msg.text = msg.plain_text = text
        msg.edits += 1
        msg.raw = {**msg.raw, "text": text, "edit_date": int(time.time())}
        return self.push_update({"edited_message": msg.raw})

    def user_clicks(
        self, chat_id: ChatId, message_id: int, *, from_user: int | Mapping[str, Any],
        button: str | None = None, data: str | None = None, query_id: str | None = None,
    ) -> int:
        """Queue a ``callback_query`` update: a user pressed an inline-keyboard button of the
        bot's message (by its label, or raw ``data``). ``query_id`` repeats an earlier click's
        id (a redelivery). Returns the update id."""
        msg = self._find(chat_id, message_id)
        if data is None:
            rows = (msg.raw.get("reply_markup") or {}).get("inline_keyboard") or []
            found = [b for row in rows for b in row if button is not None and button in b["text"]]
            if not found:
                raise AssertionError(f"message {message_id} has no button {button!r}")
            data = str(found[0]["callback_data"])
        qid = query_id or str(next(self._query_ids))
        return self.push_update({"callback_query": {
            "id": qid, "from": self._user(from_user), "message": dict(msg.raw),
            "chat_instance": str(chat_id), "data": data,
        }})

    def push_update(self, update: Mapping[str, Any]) -> int:
        """Queue a raw update (any shape, for fuzzing); ``update_id`` is assigned if absent."""
        body = dict(update)
        if not isinstance(body.get("update_id"), int):
            body["update_id"] = next(self._update_ids)
        else:
            self._update_ids = itertools.count(max(body["update_id"] + 1, next(self._update_ids)))
        self.all_updates[body["update_id"]] = body
        self._pending.append(body)
        self._pending.sort(key=lambda u: int(u["update_id"]))
        self._wake()
        return int(body["update_id"])

    def message_id_for(self, update_id: int) -> int:
        """The message id carried by a queued update."""
        update = self.all_updates[update_id]
        for key in ("message", "edited_message", "channel_post"):
            if key in update:
                return int(update[key]["message_id"])
        raise KeyError(f"update {update_id} carries no message")

    @property
    def pending_updates(self) -> list[JSONDict]:
        """Updates not yet confirmed by a ``getUpdates`` offset (or webhook delivery)."""
        return list(self._pending)

    def add_file(
        self, content: bytes, *, file_id: str | None = None, file_path: str | None = None
    ) -> str:
        """Store a file served by ``getFile`` and the file URL; returns its file id."""
        fid = file_id or f"FILE{secrets.token_hex(6)}"
        self._files[fid] = (file_path or f"documents/{fid}.bin", content)
        return fid

    def fail_next(
        self,
        method: str,
        *,
        status: int = 429,
        retry_after: int | None = None,
        chat_id: ChatId | None = None,
        description: str | None = None,
        times: int = 1,
        apply_effect: bool = False,
    ) -> None:
        """Make the next ``times`` calls of ``method`` (for ``chat_id`` if given) fail.

        ``status=429`` answers like Telegram's flood control (``retry_after`` defaults to 1).
        ``apply_effect=True`` performs the call and then answers the error, so the client cannot
        know the outcome (a message was sent, but the sender saw a failure).
        """
        if status == 429 and retry_after is None:
            retry_after = 1
        chat = None if chat_id is None else str(chat_id)
        self.inject(Fault(
            method=method, status=status, times=times, apply_effect=apply_effect,
            retry_after=retry_after, detail={"description": description},
            when=None if chat is None else (lambda params: str(params.get("chat_id")) == chat),
        ))

    def messages_in(
        self,
        chat_id: ChatId,
        *,
        from_bot: bool | None = None,
        message_thread_id: int | None = None,
    ) -> list[ChatMessage]:
        """The chat's visible messages in order, optionally only the bot's / one topic's."""
        out = []
        for msg in sorted(self._messages.get(chat_id, {}).values(), key=lambda m: m.message_id):
            if from_bot is not None and msg.from_bot != from_bot:
                continue
            if message_thread_id is not None and msg.message_thread_id != message_thread_id:
                continue
            out.append(msg)
        return out

    def calls_to(self, method: str) -> list[TelegramCall]:
        """Recorded calls of one method (case-insensitive)."""
        return [c for c in self.calls if c.method.lower() == method.lower()]

    async def deliver_webhook(
        self, url: str, update: Mapping[str, Any], secret_token: str | None = None
    ) -> tuple[int, str]:
        """POST one update to a webhook URL as Telegram does; returns (status, body)."""
        body = dict(update)
        body.setdefault("update_id", next(self._update_ids))
        headers = {"Content-Type": "application/json"}
        if secret_token is not None:
            headers["X-Telegram-Bot-Api-Secret-Token"] = secret_token
        session = await self._client_session()
        async with session.post(url, data=json.dumps(body), headers=headers) as resp:
            return resp.status, await resp.text()

    # ----------------------------------------------------------------- internals
    def _user(self, from_user: int | Mapping[str, Any]) -> JSONDict:
        if isinstance(from_user, Mapping):
            base = dict(from_user)
            uid = int(base["id"])
        else:
            uid, base = int(from_user), {}
        return {
            "id": uid,
            "is_bot": False,
            "first_name": f"User{uid}",
            "username": f"user{uid}",
            **base,
        }

    def _bot_user(self) -> JSONDict:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": self.bot_name,
            "username": self.bot_username,
        }

    def _new_message_id(self, chat_id: ChatId) -> int:
        mid = self._next_message_id.get(chat_id, 1)
        self._next_message_id[chat_id] = mid + 1
        return mid

    def _auto_entities(self, text: str) -> list[JSONDict]:
        ents: list[JSONDict] = []
        cmd = re.match(r"/[A-Za-z0-9_]+(@[A-Za-z0-9_]+)?", text)
        if cmd:
            ents.append({"type": "bot_command", "offset": 0, "length": utf16_len(cmd.group(0))})
        for m in re.finditer(r"@" + re.escape(self.bot_username) + r"\b", text, re.IGNORECASE):
            if cmd and m.start() < cmd.end():
                continue
            ents.append(
                {
                    "type": "mention",
                    "offset": utf16_len(text[: m.start()]),
                    "length": utf16_len(m.group(0)),
                }
            )
        return ents

    def _store_user_message(
        self,
        chat_id: ChatId,
        text: str,
        *,
        from_user: int | Mapping[str, Any],
        thread_id: int | None,
        reply_to: int | None,
        date: int | None,
        extra: Mapping[str, Any] | None,
        entities: Sequence[Mapping[str, Any]] | None = None,
    ) -> ChatMessage:
        user = self._user(from_user)
        mid = self._new_message_id(chat_id)
        raw: JSONDict = {
            "message_id": mid,
            "from": user,
            "chat": dict(self._chats[chat_id]),
            "date": int(time.time()) if date is None else date,
        }
        if text:
            raw["text"] = text
            ents = (
                [dict(e) for e in entities] if entities is not None else self._auto_entities(text)
            )
            if ents:
                raw["entities"] = ents
        if thread_id is not None:
            raw["message_thread_id"] = thread_id
            raw["is_topic_message"] = True
        # Inside a topic, a message that replies to nothing replies to the topic's root, as on
        # Telegram; connectors that derive threads from reply chains see the same shape.
        target = reply_to if reply_to is not None else thread_id
        if target is not None and target in self._messages.get(chat_id, {}):
            raw["reply_to_message"] = _without_reply(self._messages[chat_id][target].raw)
        raw.update(extra or {})
        msg = ChatMessage(
            chat_id=chat_id,
            message_id=mid,
            from_bot=False,
            user_id=user["id"],
            text=text,
            plain_text=text,
            message_thread_id=thread_id,
            reply_to_message_id=reply_to,
            date=raw["date"],
            raw=raw,
        )
        self._messages.setdefault(chat_id, {})[mid] = msg
        return msg

    def _find(self, chat_id: ChatId, message_id: int) -> ChatMessage:
        msg = self._messages.get(chat_id, {}).get(message_id)
        if msg is None:
            raise KeyError((chat_id, message_id))
        return msg

    def _chat(self, params: Mapping[str, Any]) -> ChatId:
        raw = params.get("chat_id")
        if raw is None or raw == "":
            raise _bad("chat_id is empty")
        chat_id: ChatId = raw
        if isinstance(raw, str):
            with contextlib.suppress(ValueError):
                chat_id = int(raw)
        if isinstance(chat_id, str):
            chat_id = next(
                (cid for cid, c in self._chats.items() if "@" + str(c.get("username")) == raw),
                chat_id,
            )
        if chat_id not in self._chats:
            raise _bad("chat not found")
        return chat_id

    async def _read_params(self, request: web.Request) -> JSONDict:
        params: JSONDict = {}
        for key, value in request.query.items():
            params[key] = _decode_form_value(key, value)
        if request.content_type == "application/json":
            raw = await request.read()
            if raw:
                body = json.loads(raw)
                if not isinstance(body, dict):
                    raise _bad("request body must be a JSON object")
                params.update(body)
        elif request.can_read_body:
            form = await request.post()
            for key, field_value in form.items():
                if isinstance(field_value, web.FileField):
                    params[key] = {
                        "filename": field_value.filename,
                        "content": field_value.file.read(),
                    }
                elif isinstance(field_value, str):
                    params[key] = _decode_form_value(key, field_value)
        return params

    @route("bot api", path="/bot{token}/{method}")
    async def _dispatch(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        try:
            params = await self._read_params(request)
        except (ValueError, _ApiError) as exc:
            return _error_response(_bad(str(exc)) if isinstance(exc, ValueError) else exc)
        call = TelegramCall(method=method, params=params)
        self.calls.append(call)
        try:
            if request.match_info["token"] != self.token:
                raise _ApiError(401, "Unauthorized")
            handler = self.handler_for(method)
            if handler is None:
                raise _ApiError(404, "Not Found: method not found")
            if self.route_key(method) in _FLOOD_COUNTED and self._flood():
                self.flooded += 1
                raise _ApiError(429, "Too Many Requests: retry after 1", {"retry_after": 1})
            if self.route_key(method) in _GROUP_COUNTED:
                wait = self._group_flood(params.get("chat_id"))
                if wait:
                    self.flooded += 1
                    raise _ApiError(429, f"Too Many Requests: retry after {wait}",
                                    {"retry_after": wait})
            failure = self.take_fault(method, params)
            if failure is not None and not failure.apply_effect:
                raise _failure_error(failure)
            result = await handler(params)
            if failure is not None:
                raise _failure_error(failure)
        except _ApiError as exc:
            call.status = exc.status
            self._wake()
            return _error_response(exc)
        self._wake()
        return web.json_response({"ok": True, "result": result})

    @route("file", verb="GET", path="/file/bot{token}/{path:.+}")
    async def _download(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        path = request.match_info["path"]
        self.downloads.append(path)
        for file_path, content in self._files.values():
            if file_path == path:
                return web.Response(body=content)
        return web.Response(status=404)

    # ----------------------------------------------------------------- methods
    @route("deleteMyCommands")
    @route("answerCallbackQuery")
    async def _true(self, params: JSONDict) -> bool:
        return True

    @staticmethod
    def _commands_scope(params: JSONDict) -> str:
        scope = params.get("scope") or {}
        if isinstance(scope, str):
            scope = json.loads(scope)
        return str(scope.get("type", "default"))

    @route("setMyCommands")
    async def _set_my_commands(self, params: JSONDict) -> bool:
        """The menu per scope type (``default``, ``all_private_chats``, ...), kept for
        ``getMyCommands``; each call is in :attr:`calls` too."""
        commands = params.get("commands") or []
        if isinstance(commands, str):
            commands = json.loads(commands)
        self.my_commands[self._commands_scope(params)] = [
            {"command": c["command"], "description": c["description"]} for c in commands]
        return True

    @route("getMyCommands")
    async def _get_my_commands(self, params: JSONDict) -> list[JSONDict]:
        return list(self.my_commands.get(self._commands_scope(params), []))

    @route("getMe")
    async def _get_me(self, params: JSONDict) -> JSONDict:
        return {
            **self._bot_user(),
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    @route("getUpdates")
    async def _get_updates(self, params: JSONDict) -> list[JSONDict]:
        if self.webhook_url is not None:
            raise _ApiError(
                409,
                "Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first",
            )
        offset = int(params.get("offset") or 0)
        limit = max(1, min(100, int(params.get("limit") or 100)))
        timeout = max(0.0, float(params.get("timeout") or 0))
        self._confirm(offset)
        self._poll_generation += 1
        generation = self._poll_generation
        self._wake()  # the earlier poller, if any, must see that it was superseded
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if generation != self._poll_generation:
                raise _ApiError(
                    409,
                    "Conflict: terminated by other getUpdates request; "
                    "make sure that only one bot instance is running",
                )
            if self._pending or self._closing:
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._changed.wait()
        return [dict(u) for u in self._pending[:limit]]

    def _confirm(self, offset: int) -> None:
        # Telegram forgets confirmed updates for good: a later offset cannot bring them back.
        if offset > 0:
            self._pending = [u for u in self._pending if int(u["update_id"]) >= offset]
        elif offset < 0:
            self._pending = self._pending[offset:]

    def _check_text(self, text: Any, parse_mode: str | None) -> tuple[str, list[JSONDict]]:
        if not isinstance(text, str) or not text.strip():
            raise _bad("message text is empty")
        plain, entities = text, list[JSONDict]()
        if parse_mode is not None and parse_mode.lower() == "html":
            try:
                plain, entities = parse_telegram_html(text)
            except TelegramEntityError as exc:
                raise _bad(f"can't parse entities: {exc}") from None
            if not plain.strip():
                raise _bad("message text is empty")
        if utf16_len(plain) > _MAX_TEXT:
            raise _bad("message is too long")
        return plain, entities

    @route("sendMessage")
    async def _send_message(self, params: JSONDict) -> JSONDict:
        chat_id = self._chat(params)
        parse_mode = params.get("parse_mode") or None
        plain, entities = self._check_text(params.get("text"), parse_mode)
        thread_id, reply_to = self._placement(chat_id, params)
        chat_messages = self._messages[chat_id]
        mid = self._new_message_id(chat_id)
        raw: JSONDict = {
            "message_id": mid,
            "from": self._bot_user(),
            "chat": dict(self._chats[chat_id]),
            "date": int(time.time()),
            "text": plain,
        }
        if entities:
            raw["entities"] = entities
        if thread_id is not None:
            raw["message_thread_id"] = thread_id
            raw["is_topic_message"] = True
        if reply_to is not None:
            raw["reply_to_message"] = _without_reply(chat_messages[reply_to].raw)
        if params.get("reply_markup") is not None:
            raw["reply_markup"] = params["reply_markup"]
        text = str(params["text"])
        chat_messages[mid] = ChatMessage(
            chat_id=chat_id,
            message_id=mid,
            from_bot=True,
            user_id=self.bot_id,
            text=text,
            plain_text=plain,
            parse_mode=parse_mode,
            message_thread_id=thread_id,
            reply_to_message_id=reply_to,
            date=raw["date"],
            raw=raw,
        )
        self.sent.append(
            SentMessage(
                method="sendMessage",
                chat_id=chat_id,
                message_id=mid,
                text=text,
                plain_text=plain,
                parse_mode=parse_mode,
                message_thread_id=thread_id,
                reply_to_message_id=reply_to,
                reply_markup=params.get("reply_markup"),
            )
        )
        return raw

    def _placement(self, chat_id: ChatId, params: JSONDict) -> tuple[int | None, int | None]:
        """(topic, message replied to) of a bot message, checked as Telegram does."""
        thread_id = _opt_int(params.get("message_thread_id"))
        reply = params.get("reply_parameters")
        reply_to = _opt_int(reply.get("message_id") if isinstance(reply, dict) else None)
        reply_to = reply_to or _opt_int(params.get("reply_to_message_id"))
        allow_missing = bool(
            (isinstance(reply, dict) and reply.get("allow_sending_without_reply"))
            or params.get("allow_sending_without_reply")
        )
        chat_messages = self._messages.setdefault(chat_id, {})
        if reply_to is not None and reply_to not in chat_messages:
            if not allow_missing:
                raise _bad("message to be replied not found")
            reply_to = None
        if thread_id is not None and self._chats[chat_id].get("is_forum"):
            root = chat_messages.get(thread_id)
            if root is None or "forum_topic_created" not in root.raw:
                raise _bad("message thread not found")
        return thread_id, reply_to

    @route("sendDocument")
    async def _send_document(self, params: JSONDict) -> JSONDict:
        return await self._send_file("sendDocument", "document", params)

    @route("sendPhoto")
    async def _send_photo(self, params: JSONDict) -> JSONDict:
        return await self._send_file("sendPhoto", "photo", params)

    @route("sendVoice")
    async def _send_voice(self, params: JSONDict) -> JSONDict:
        return await self._send_file("sendVoice", "voice", params)

    async def _send_file(self, method: str, field_name: str, params: JSONDict) -> JSONDict:
        chat_id = self._chat(params)
        part = params.get(field_name)
        if not isinstance(part, dict) or not isinstance(part.get("content"), bytes):
            # a file_id or URL of an existing file: not simulated
            raise _bad(f"there is no {field_name} in the request")
        data: bytes = part["content"]
        filename = str(part.get("filename") or field_name)
        limit = (PHOTO_LIMIT if field_name == "photo" else DOCUMENT_LIMIT)
        if len(data) > limit:
            raise _ApiError(413, "Request Entity Too Large")
        if not data:
            raise _bad("file must be non-empty")
        caption = params.get("caption")
        caption = str(caption) if caption else None
        if caption is not None and len(caption) > 1024:
            raise _bad("message caption is too long")
        thread_id, reply_to = self._placement(chat_id, params)
        chat_messages = self._messages[chat_id]
        fid = self.add_file(data, file_path=f"{field_name}s/{filename}")
        file_info: JSONDict = {"file_id": fid, "file_unique_id": f"U{fid}",
                               "file_size": len(data)}
        mid = self._new_message_id(chat_id)
        raw: JSONDict = {
            "message_id": mid,
            "from": self._bot_user(),
            "chat": dict(self._chats[chat_id]),
            "date": int(time.time()),
        }
        if field_name == "photo":
            raw["photo"] = [{**file_info, "width": 1, "height": 1}]
        elif field_name == "voice":
            raw["voice"] = {**file_info, "duration": 1, "mime_type": "audio/ogg"}
        else:
            raw["document"] = {**file_info, "file_name": filename}
        if caption is not None:
            raw["caption"] = caption
        if thread_id is not None:
            raw["message_thread_id"] = thread_id
            raw["is_topic_message"] = True
        if reply_to is not None:
            raw["reply_to_message"] = _without_reply(chat_messages[reply_to].raw)
        chat_messages[mid] = ChatMessage(
            chat_id=chat_id, message_id=mid, from_bot=True, user_id=self.bot_id,
            text=caption or "", plain_text=caption or "", message_thread_id=thread_id,
            reply_to_message_id=reply_to, date=raw["date"], raw=raw,
        )
        self.uploads.append(TelegramUpload(
            method=method, chat_id=chat_id, message_id=mid, filename=filename, data=data,
            caption=caption, message_thread_id=thread_id, reply_to_message_id=reply_to,
        ))
        self._wake()
        await self._held_upload()
        return raw

    @route("sendMessageDraft")
    async def _send_message_draft(self, params: JSONDict) -> bool:
        """An ephemeral preview of a message being written, in a private chat (Bot API 9.3):
        nothing is stored in the chat; the message itself is sent afterwards."""
        chat_id = self._chat(params)
        if isinstance(chat_id, int) and chat_id < 0:
            raise _bad("message drafts can be sent only to private chats")
        draft_id = _opt_int(params.get("draft_id"))
        if not draft_id:
            raise _bad("draft_id must be non-zero")
        plain, _entities = self._check_text(params.get("text"), params.get("parse_mode") or None)
        self.drafts.append((chat_id, draft_id, plain))
        return True

    def _flood(self) -> bool:
        """One unit of the flood budget; True: none left (the call is refused)."""
        if self.flood_per_s <= 0:
            return False
        now = time.monotonic()
        self._flood_tokens = min(self.flood_per_s,
                                 self._flood_tokens + (now - self._flood_at) * self.flood_per_s)
        self._flood_at = now
        if self._flood_tokens < 1:
            return True
        self._flood_tokens -= 1
        return False

    def _group_flood(self, raw_chat: Any) -> int:
        """One unit of a group's budget; the seconds to wait when none is left (0: sent)."""
        try:
            chat = int(raw_chat)
        except (TypeError, ValueError):
            return 0
        if self.group_limit <= 0 or chat >= 0:
            return 0
        rate = self.group_limit / self.group_period_s
        now = time.monotonic()
        tokens, at = self._group_tokens.get(chat, (float(self.group_limit), now))
        tokens = min(float(self.group_limit), tokens + (now - at) * rate)
        if tokens < 1:
            self._group_tokens[chat] = (tokens, now)
            self.group_flooded[chat] = self.group_flooded.get(chat, 0) + 1
            return max(1, math.ceil((1 - tokens) / rate))
        self._group_tokens[chat] = (tokens - 1, now)
        return 0

    @route("editMessageText")
    async def _edit_message_text(self, params: JSONDict) -> JSONDict | bool:
        if params.get("inline_message_id"):
            return True
        chat_id = self._chat(params)
        parse_mode = params.get("parse_mode") or None
        plain, entities = self._check_text(params.get("text"), parse_mode)
        mid = _opt_int(params.get("message_id"))
        msg = self._messages[chat_id].get(mid) if mid is not None else None
        if msg is None:
            raise _bad("message to edit not found")
        if not msg.from_bot:
            raise _bad("message can't be edited")
        markup = params.get("reply_markup")
        if (
            msg.plain_text == plain
            and msg.raw.get("entities", []) == entities
            and (markup is None or markup == msg.raw.get("reply_markup"))
        ):
            raise _bad(
                "message is not modified: specified new message content and reply markup are "
                "exactly the same as a current content and reply markup of the message"
            )
        text = str(params["text"])
        msg.text, msg.plain_text, msg.parse_mode = text, plain, parse_mode
        msg.edits += 1
        msg.raw = {**msg.raw, "text": plain, "edit_date": int(time.time())}
        msg.raw.pop("entities", None)
        if entities:
            msg.raw["entities"] = entities
        if markup is not None:
            msg.raw["reply_markup"] = markup
        else:  # like Telegram: an edit without reply_markup removes the inline keyboard
            msg.raw.pop("reply_markup", None)
        self.sent.append(
            SentMessage(
                method="editMessageText",
                chat_id=chat_id,
                message_id=msg.message_id,
                text=text,
                plain_text=plain,
                parse_mode=parse_mode,
                message_thread_id=msg.message_thread_id,
                reply_to_message_id=msg.reply_to_message_id,
                reply_markup=markup,
            )
        )
        return msg.raw

    @route("deleteMessage")
    async def _delete_message(self, params: JSONDict) -> bool:
        chat_id = self._chat(params)
        mid = _opt_int(params.get("message_id"))
        if mid is None or self._messages[chat_id].pop(mid, None) is None:
            raise _bad("message to delete not found")
        self.deleted.append((chat_id, mid))
        return True

    @route("setMessageReaction")
    async def _set_message_reaction(self, params: JSONDict) -> bool:
        chat_id = self._chat(params)
        mid = _opt_int(params.get("message_id"))
        msg = self._messages[chat_id].get(mid) if mid is not None else None
        if msg is None:
            raise _bad("message to react not found")  # wording approximated
        reaction = params.get("reaction") or []
        if not isinstance(reaction, list):
            raise _bad("reaction must be an array")
        msg.reactions = [str(r.get("emoji") or r.get("custom_emoji_id")) for r in reaction]
        self.reactions.append({"chat_id": chat_id, "message_id": mid, "reaction": reaction})
        return True

    @route("sendChatAction")
    async def _send_chat_action(self, params: JSONDict) -> bool:
        chat_id = self._chat(params)
        self.chat_actions.append(
            {
                "chat_id": chat_id,
                "action": params.get("action"),
                "message_thread_id": _opt_int(params.get("message_thread_id")),
            }
        )
        return True

    @route("getFile")
    async def _get_file(self, params: JSONDict) -> JSONDict:
        fid = str(params.get("file_id") or "")
        if fid not in self._files:
            raise _bad("invalid file_id")
        path, content = self._files[fid]
        return {
            "file_id": fid,
            "file_unique_id": f"U{fid}",
            "file_size": len(content),
            "file_path": path,
        }

    @route("getChat")
    async def _get_chat(self, params: JSONDict) -> JSONDict:
        chat_id = self._chat(params)
        return {**self._chats[chat_id], "accent_color_id": 0, "max_reaction_count": 11}

    @route("getChatMember")
    async def _get_chat_member(self, params: JSONDict) -> JSONDict:
        self._chat(params)
        uid = int(params.get("user_id") or 0)
        if uid == self.bot_id:
            return {"status": "administrator", "user": self._bot_user(), "can_be_edited": False}
        return {"status": "member", "user": self._user(uid)}

    @route("setWebhook")
    async def _set_webhook(self, params: JSONDict) -> bool:
        url = str(params.get("url") or "")
        if not url:
            return await self._delete_webhook(params)
        self.webhook_url = url
        self.webhook_secret = params.get("secret_token") or None
        if params.get("drop_pending_updates"):
            self._pending.clear()
        if self._webhook_task is None or self._webhook_task.done():
            self._webhook_task = asyncio.create_task(self._webhook_pump())
        return True

    @route("deleteWebhook")
    async def _delete_webhook(self, params: JSONDict) -> bool:
        self.webhook_url = None
        self.webhook_secret = None
        if params.get("drop_pending_updates"):
            self._pending.clear()
        return True

    @route("getWebhookInfo")
    async def _get_webhook_info(self, params: JSONDict) -> JSONDict:
        return {
            "url": self.webhook_url or "",
            "has_custom_certificate": False,
            "pending_update_count": len(self._pending),
        }

    async def _webhook_pump(self) -> None:
        """Deliver queued updates to the webhook in order; refused ones are retried."""
        while self.webhook_url is not None and not self._closing:
            if not self._pending:
                await self._changed.wait()
                continue
            update = self._pending[0]
            try:
                status, _ = await self.deliver_webhook(
                    self.webhook_url, update, self.webhook_secret
                )
            except aiohttp.ClientError:
                status = 0
            self.webhook_deliveries.append((int(update["update_id"]), status))
            if 200 <= status < 300:
                if self._pending and self._pending[0] is update:
                    self._pending.pop(0)
                self._wake()
            else:
                self._wake()
                await asyncio.sleep(self.webhook_retry_delay)


def _without_reply(raw: JSONDict) -> JSONDict:
    # Telegram nests reply_to_message one level deep only.
    return {k: v for k, v in raw.items() if k != "reply_to_message"}


def _decode_form_value(key: str, value: str) -> Any:
    if key in _STRING_PARAMS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _opt_int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise _bad(f"invalid integer value {value!r}") from None


#: the methods the fake's flood control counts (messages shown in a chat)
_FLOOD_COUNTED = frozenset({"sendmessage", "editmessagetext", "sendmessagedraft"})
#: the methods a group's budget counts (messages shown in the group, edits included)
_GROUP_COUNTED = frozenset({"sendmessage", "editmessagetext", "sendphoto", "senddocument",
                            "sendvoice"})


def _failure_error(failure: Fault) -> _ApiError:
    description = failure.detail.get("description")
    retry_after = failure.retry_after
    if failure.status == 429:
        return _ApiError(
            429,
            description or f"Too Many Requests: retry after {retry_after}",
            {"retry_after": retry_after},
        )
    try:
        text = HTTPStatus(failure.status).phrase
    except ValueError:
        text = "Error"
    return _ApiError(failure.status, description or text)


def _error_response(exc: _ApiError) -> web.Response:
    body: JSONDict = {"ok": False, "error_code": exc.status, "description": exc.description}
    if exc.parameters:
        body["parameters"] = exc.parameters
    return web.json_response(body, status=exc.status)
