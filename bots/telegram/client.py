"""The Telegram client: everything a send goes through, in one module.

* **The client** (:class:`TelegramClient`): what the layer sends through (send / edit /
  react / upload / typing), with the ``ApprovalControls`` (inline keyboards,
  ``answerCallbackQuery``) and ``AttachmentReader`` abilities; not ``ReadBack`` (the Bot
  API reads no history). Telegram errors become :class:`~bots.port.DeliveryError` kinds in
  one place, :func:`_map_error`. A mixin of
  :class:`~bots.telegram.connector.TelegramConnector`: it reads the bot the connector
  builds at connect; it holds nothing of the intake.
* **Pacing** (:class:`PerChatRateLimiter`): a PTB rate limiter that honours 429
  ``retry_after`` per chat, without freezing the others.

  PTB's ``AIORateLimiter`` pauses *every* request of the bot while it sleeps off one chat's
  ``retry_after`` (a global event): one flooded group then delays every other chat's
  replies, the "429 freeze" peers' users report. This limiter keeps PTB's
  ``BaseRateLimiter`` interface (plugged in with ``ExtBot(rate_limiter=...)``) and the same
  throughput limits (``aiolimiter``: overall per second, group ``sendMessage`` per minute),
  but a 429 only holds back later requests *to that chat*. A ``retry_after`` longer than
  ``max_retry_after_s`` is not slept on inside the request: it is raised, so the caller can
  keep the reply in the outbox instead of blocking a worker for minutes.

  Groups: every message shown in a group (``sendMessage``, an ``editMessageText``, a file
  or voice note: :data:`GROUP_COUNTED`) draws from that group's budget (20 a minute by
  default, Telegram's limit for a group: edits count), as well as from the overall one. The
  group budget is a bucket one message smaller than the limit (the margin absorbs a request
  that reaches Telegram later than it left here), refilled at the limit's rate.

  Answers first: the overall budget (30 requests/s by default) is shared by every call,
  and a reply is three of them (the 👀 reaction, the progress message, the answer as its
  edit) plus "typing" every few seconds per running turn. When the budget is short, the
  cosmetic calls (``sendChatAction``, ``setMessageReaction``) take only what the others
  leave: they wait while any other request waits for the budget and never take its last
  half. A "typing" that cannot go at once is dropped (it lasts 5 s and the next one
  follows); the 👀 ack waits (the turn runs beside it, never waiting for it), so 50 chats'
  acks leave half the budget to their first words and the words go before the rest of the
  acks. Waiting acks go in arrival order, one looking at the budget at a time (the rest
  sleep on a lock, unwoken). A burst of indicators never delays an answer. A streamed
  draft (:meth:`TelegramClient.stream_draft`) is cosmetic too: it is skipped, never
  queued, while the overall budget is spent, and in a group while an answer waits for the
  group's budget or less than half of that budget is left; the draft of the next text
  delta (the latest text) goes when a slot is free again, and the final answer replaces
  whatever draft was shown last.
* **The transport** (:class:`AiohttpRequest`): python-telegram-bot networking on aiohttp
  instead of httpx.

  PTB's default ``HTTPXRequest`` (httpx + httpcore + anyio) costs a large share of the CPU
  of a reply; aiohttp is already in the process (the webhook server, the fakes) and is
  cheaper per request. :class:`AiohttpRequest` keeps the contract of PTB's
  ``BaseRequest``; status codes are mapped to ``TelegramError`` subclasses by PTB itself
  (``BaseRequest._request_wrapper``).

  TLS trusts the system's CA store (which honours ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``)
  plus certifi's bundle, so hosts that worked with httpx (certifi) keep working, including
  slim images without system CAs.

  Not supported, on purpose: proxies (the session ignores ``HTTP(S)_PROXY``) and HTTP/2. A
  deployment that needs either sets ``[channels.telegram] http_backend = "httpx"``.

They are one module so that a send is one hop of ours: the layer calls the client, and
PTB calls back into the pacing and the transport beside it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import ssl
import time
from collections.abc import Callable, Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import aiohttp
import certifi
import structlog
from aiolimiter import AsyncLimiter
from telegram import InputFile, ReplyParameters
from telegram._utils.defaultvalue import DefaultValue
from telegram._utils.types import ODVInput
from telegram.error import (
    BadRequest,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.ext import BaseRateLimiter, ExtBot
from telegram.request import BaseRequest, HTTPXRequest, RequestData

from bots._download import TOO_LARGE, stream_to_file, telegram_file_url
from bots.events import Attachment, InboundEvent, ReplyTarget
from bots.format import Chunk
from bots.port import AttachmentRefused, DeliveryError

__all__ = [
    "APPROVAL_ACTION",
    "CAPTION_LIMIT",
    "COSMETIC",
    "DOCUMENT_LIMIT_MB",
    "GROUP_COUNTED",
    "PHOTO_LIMIT_MB",
    "AiohttpRequest",
    "HttpBackend",
    "PerChatRateLimiter",
    "TelegramClient",
    "approval_keyboard",
    "build_request",
    "retry_after_seconds",
]

log = structlog.get_logger(__name__)

# -- the client ------------------------------------------------------------------------------


#: Bot API upload limits (MiB): documents, photos; captions in characters
DOCUMENT_LIMIT_MB = 50
PHOTO_LIMIT_MB = 10
CAPTION_LIMIT = 1024


class _Bot(ExtBot[Any]):
    """ExtBot plus calls whose results stay JSON.

    ``getUpdates``: parsed one update at a time by us. ``sendMessage`` / ``editMessageText`` /
    ``setMessageReaction``: a reply needs only the message id, and building PTB's objects
    for the request and from the answer was about a tenth of the CPU of a reply. All still go
    through ``_do_post`` (rate limiter, error mapping).
    """

    async def post_json(self, endpoint: str, data: dict[str, Any]) -> Any:
        """Call ``endpoint`` (Bot API name) with ``data``; the ``result`` as JSON."""
        return await self._post(endpoint, data)

    async def get_raw_updates(
        self, *, offset: int | None, poll_s: float, limit: int, allowed: list[str]
    ) -> list[Any]:
        data: dict[str, Any] = {"timeout": int(poll_s), "limit": limit,
                                "allowed_updates": allowed}
        if offset is not None:
            data["offset"] = offset
        result = await self._post("getUpdates", data, read_timeout=poll_s + 10.0)
        return result if isinstance(result, list) else []


class TelegramClient:
    """Telegram's outbound half (see the module docstring)."""

    #: the Bot API client (built at connect)
    bot: _Bot | None


    def _route(self, target: ReplyTarget) -> dict[str, Any]:
        kw: dict[str, Any] = {"chat_id": int(target.channel)}
        thread = target.extra.get("message_thread_id")
        if isinstance(thread, int):
            kw["message_thread_id"] = thread
        return kw

    async def send(self, target: ReplyTarget, chunk: Chunk, *, plain: bool = False) -> str:
        assert self.bot is not None
        data = self._route(target)
        if target.reply_to is not None and target.reply_to.lstrip("-").isdigit():
            data["reply_parameters"] = {"message_id": int(target.reply_to),
                                        "allow_sending_without_reply": True}
        data.update(_text(chunk, plain))
        try:
            result = await self.bot.post_json("sendMessage", data)
        except TelegramError as exc:
            raise _map_error(exc, sending=True) from exc
        message_id = result.get("message_id") if isinstance(result, dict) else None
        if not isinstance(message_id, int):  # accepted, but we cannot tell which message
            raise DeliveryError("unknown", f"sendMessage answered without a message id: "
                                           f"{type(result).__name__}")
        return str(message_id)

    async def send_approval(self, target: ReplyTarget, chunk: Chunk, *, short_id: str) -> str:
        """The request with an inline keyboard (Approve / Deny); a click comes back as a
        ``callback_query`` (:mod:`bots.telegram.inbound`), answered by :meth:`answer_action`."""
        assert self.bot is not None
        data = self._route(target)
        data.update(_text(chunk, False))
        data["reply_markup"] = approval_keyboard(short_id)
        try:
            result = await self.bot.post_json("sendMessage", data)
        except TelegramError as exc:
            raise _map_error(exc, sending=True) from exc
        message_id = result.get("message_id") if isinstance(result, dict) else None
        if not isinstance(message_id, int):
            raise DeliveryError("unknown", "sendMessage answered without a message id")
        return str(message_id)

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        """``answerCallbackQuery``: the clicking user sees ``text`` (only they do)."""
        assert self.bot is not None
        qid = event.extra.get("callback_query_id")
        if not isinstance(qid, str):
            return
        try:
            await self.bot.post_json("answerCallbackQuery",
                                     {"callback_query_id": qid, "text": text[:190]})
        except TelegramError as exc:
            raise _map_error(exc, sending=False) from exc

    async def edit(
        self, target: ReplyTarget, message_id: str, chunk: Chunk, *, plain: bool = False
    ) -> None:
        assert self.bot is not None
        data = {"chat_id": int(target.channel), "message_id": int(message_id),
                **_text(chunk, plain)}
        try:
            await self.bot.post_json("editMessageText", data)
        except TelegramError as exc:
            raise _map_error(exc, sending=False) from exc

    async def delete_message(self, target: ReplyTarget, message_id: str) -> None:
        """``deleteMessage`` (:class:`bots.progress.MessageRemover`: a streamed draft's page
        the final answer does not fill); a message already gone is no error."""
        assert self.bot is not None
        try:
            await self.bot.post_json("deleteMessage", {"chat_id": int(target.channel),
                                                       "message_id": int(message_id)})
        except TelegramError as exc:
            err = _map_error(exc, sending=False)
            if err.kind != "not_found":
                raise err from exc

    async def stream_draft(self, target: ReplyTarget, message_id: str, chunk: Chunk) -> None:
        """An answer being written (:class:`bots.progress.DraftStreamer`): in a private chat
        ``sendMessageDraft`` (an ephemeral preview under the progress message; the answer
        then replaces that message), elsewhere an edit of the progress message. Both go
        through the same pacing as every other call (:class:`PerChatRateLimiter`)."""
        assert self.bot is not None
        limiter = self.bot.rate_limiter
        if isinstance(limiter, PerChatRateLimiter) and (
                limiter.busy() or limiter.group_busy(target.channel)):
            # A draft is cosmetic: with the overall budget (or its group's) short, it is
            # skipped (the next state, or the answer, shows instead), never queued before
            # the answers and progress messages other threads wait to send.
            return
        if target.channel.startswith("-"):  # groups and channels have no drafts
            await self.edit(target, message_id, chunk)
            return
        data = {**self._route(target), "draft_id": int(message_id), **_text(chunk, False)}
        try:
            await self.bot.post_json("sendMessageDraft", data)
        except TelegramError as exc:
            raise _map_error(exc, sending=False) from exc

    async def download(self, attachment: Attachment, dest: Path, *, max_bytes: int) -> int:
        """``getFile``, then the file under ``base_file_url`` (a declared size over the limit
        is refused before any download)."""
        assert self.bot is not None
        try:
            info = await self.bot.post_json("getFile", {"file_id": attachment.ref})
        except TelegramError as exc:
            raise _map_error(exc, sending=False) from exc
        if not isinstance(info, dict) or not isinstance(info.get("file_path"), str):
            raise AttachmentRefused("Telegram did not give the file (over its 20 MB limit?)")
        declared = info.get("file_size")
        if isinstance(declared, int) and declared > max_bytes:
            raise AttachmentRefused(TOO_LARGE)
        # beneath /file/bot<token>/ of the configured file URL, never elsewhere (#30)
        base = self.bot.base_file_url  # PTB's, token included
        url = telegram_file_url(base, info["file_path"])
        return await stream_to_file(url, dest, max_bytes=max_bytes, allowed=(base,))

    def upload_limit(self, *, image: bool) -> int:
        return (PHOTO_LIMIT_MB if image else DOCUMENT_LIMIT_MB) << 20

    async def post_file(
        self, target: ReplyTarget, *, filename: str, data: bytes, caption: str | None,
        image: bool,
    ) -> str:
        """``sendPhoto`` (``image``), ``sendVoice`` (an Ogg/Opus file: a spoken reply, shown
        as a voice note) or ``sendDocument``, in the thread as :meth:`send` replies (topic,
        reply to the message that asked)."""
        assert self.bot is not None
        route = self._route(target)
        reply = None
        if target.reply_to is not None and target.reply_to.lstrip("-").isdigit():
            reply = ReplyParameters(message_id=int(target.reply_to),
                                    allow_sending_without_reply=True)
        text = caption[:CAPTION_LIMIT] if caption else None
        upload = InputFile(data, filename=filename)
        try:
            if image:
                msg = await self.bot.send_photo(photo=upload, caption=text,
                                                reply_parameters=reply, **route)
            elif _is_opus(data):
                msg = await self.bot.send_voice(voice=upload, caption=text,
                                                reply_parameters=reply, **route)
            else:
                msg = await self.bot.send_document(document=upload, caption=text,
                                                   reply_parameters=reply, **route)
        except TelegramError as exc:
            raise _map_error(exc, sending=True) from exc
        return str(msg.message_id)

    async def react(self, target: ReplyTarget, message_id: str, emoji: str | None) -> None:
        assert self.bot is not None
        data: dict[str, Any] = {"chat_id": int(target.channel), "message_id": int(message_id),
                                "reaction": [{"type": "emoji", "emoji": emoji}] if emoji else []}
        try:
            await self.bot.post_json("setMessageReaction", data)
        except TelegramError as exc:
            raise _map_error(exc, sending=False) from exc

    async def typing(self, target: ReplyTarget) -> None:
        assert self.bot is not None
        try:
            await self.bot.send_chat_action(action="typing", **self._route(target))
        except TelegramError as exc:
            raise _map_error(exc, sending=False) from exc


_NO_PREVIEW = {"is_disabled": True}


def _is_opus(data: bytes) -> bool:
    """An Ogg file whose first stream is Opus: what Telegram plays as a voice note."""
    return data.startswith(b"OggS") and b"OpusHead" in data[:64]


def _text(chunk: Chunk, plain: bool) -> dict[str, Any]:
    """The text fields of sendMessage / editMessageText: HTML, or plain after a markup error."""
    if plain:
        return {"text": chunk.fallback, "link_preview_options": _NO_PREVIEW}
    return {"text": chunk.formatted, "parse_mode": "HTML", "link_preview_options": _NO_PREVIEW}


def _map_error(exc: TelegramError, *, sending: bool) -> DeliveryError:
    """The one place Telegram errors become DeliveryError kinds."""
    text = str(exc)
    low = text.lower()
    if isinstance(exc, RetryAfter):
        return DeliveryError("retry", text, retry_after=retry_after_seconds(exc))
    if isinstance(exc, BadRequest):
        if "can't parse entities" in low or "unsupported start tag" in low:
            return DeliveryError("markup", text)
        if "not modified" in low:
            return DeliveryError("not_modified", text)
        if "not found" in low and ("to edit" in low or "to delete" in low or "to react" in low):
            return DeliveryError("not_found", text)
        return DeliveryError("fatal", text)
    if isinstance(exc, Forbidden | InvalidToken):
        return DeliveryError("fatal", text)
    if isinstance(exc, TimedOut | NetworkError):
        # The request may have reached Telegram: for a send the outcome is unknown.
        return DeliveryError("unknown" if sending else "retry", text)
    return DeliveryError("fatal", text)


#: ``callback_data`` of the approval buttons (``bots.approvals``): ``geode:approve:K7Q2XM``;
#: a click on one is read back by :mod:`bots.telegram.inbound`
APPROVAL_ACTION = re.compile(r"^geode:(approve|deny):([A-Z0-9]{4,16})$")


def approval_keyboard(short_id: str) -> dict[str, Any]:
    """The inline keyboard of an approval request: Approve / Deny."""
    return {"inline_keyboard": [[
        {"text": "✅ Approve", "callback_data": f"geode:approve:{short_id}"},
        {"text": "🚫 Deny", "callback_data": f"geode:deny:{short_id}"},
    ]]}


# -- pacing ----------------------------------------------------------------------------------


JSONDict = dict[str, Any]
#: calls that only decorate a reply: they get the overall budget the others leave
COSMETIC = frozenset({"sendChatAction", "setMessageReaction"})
#: calls that show a message in a group, each counted in the group's budget (edits too)
GROUP_COUNTED = frozenset({"sendMessage", "editMessageText", "sendPhoto", "sendDocument",
                           "sendVoice"})


def _is_group(chat: str) -> bool:
    """A group, supergroup or channel (negative id, or an ``@username``)."""
    return chat.startswith(("-", "@"))


def retry_after_seconds(exc: RetryAfter) -> float:
    """``retry_after`` as seconds, whichever representation this PTB version keeps."""
    raw = getattr(exc, "_retry_after", None)
    if isinstance(raw, timedelta):
        return raw.total_seconds()
    if isinstance(raw, int | float):
        return float(raw)
    return 1.0


class PerChatRateLimiter(BaseRateLimiter[int]):
    """Throughput limits plus per-chat 429 back-off (see the module docstring).

    Args:
        overall_max_rate: requests per ``overall_time_period`` for the whole bot (0 = off).
        group_max_rate: messages shown (:data:`GROUP_COUNTED`) per ``group_time_period``
            per group (0 = off).
        max_retries: retries of one request after a 429.
        max_retry_after_s: longest ``retry_after`` slept on inside a request.
        on_retry: told of each 429 slept off and retried here (the daemon's metrics).
    """

    def __init__(
        self,
        *,
        overall_max_rate: float = 30,
        overall_time_period: float = 1,
        group_max_rate: float = 20,
        group_time_period: float = 60,
        max_retries: int = 3,
        max_retry_after_s: float = 30.0,
        on_retry: Callable[[], None] | None = None,
    ) -> None:
        self._overall = (AsyncLimiter(overall_max_rate, overall_time_period)
                         if overall_max_rate > 0 else None)
        #: how long one request's share of the overall budget takes to come back
        self._slot_s = overall_time_period / overall_max_rate if overall_max_rate > 0 else 0.0
        #: the part of the overall budget the cosmetic calls leave to the others
        self._reserve = overall_max_rate // 2
        #: requests other than cosmetic ones now waiting for the overall budget
        self._waiting = 0
        #: held by the cosmetic call (an ack) now waiting for the budget; the next waits here
        self._cosmetic_turn = asyncio.Lock()
        self.dropped_typing = 0
        self._group_rate = group_max_rate
        self._group_period = group_time_period
        self._groups: dict[str, AsyncLimiter] = {}
        #: group -> requests other than drafts now waiting for its budget
        self._group_waiting: dict[str, int] = {}
        self.max_retries = max_retries
        self.max_retry_after_s = max_retry_after_s
        #: chat id -> monotonic time before which nothing is sent to it
        self._held_until: dict[str, float] = {}
        self.hits: list[tuple[str, float]] = []  # (chat, retry_after) for tests and metrics
        #: called for each 429 slept off here (one raised to the caller is the caller's to count)
        self._on_retry = on_retry or (lambda: None)

    async def initialize(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None

    def busy(self) -> bool:
        """The overall budget is spent or other requests wait for it: a cosmetic update
        (a streamed draft) is better skipped than queued."""
        limiter = self._overall
        return limiter is not None and (self._waiting > 0 or not limiter.has_capacity())

    def group_busy(self, chat: str) -> bool:
        """In group ``chat``, an answer waits for the budget or less than half of it is
        left: a streamed draft is better skipped than queued (the answers keep the rest)."""
        limiter = self._group(chat) if _is_group(chat) else None
        if limiter is None:
            return False
        reserve = max(1.0, limiter.max_rate // 2)
        return self._group_waiting.get(chat, 0) > 0 or not limiter.has_capacity(1 + reserve)

    def _group(self, chat: str) -> AsyncLimiter | None:
        """The group's budget: a bucket of ``rate - 1`` (one kept as a margin for a request
        that reaches Telegram later than it left here) refilled at ``rate`` per period."""
        if self._group_rate <= 0:
            return None
        limiter = self._groups.get(chat)
        if limiter is None:
            burst = max(1.0, self._group_rate - 1)
            limiter = self._groups[chat] = AsyncLimiter(
                burst, self._group_period * burst / self._group_rate)
        return limiter

    async def _take_group(self, chat: str | None, endpoint: str) -> None:
        """One unit of the group's budget, for a message shown in a group."""
        if chat is None or endpoint not in GROUP_COUNTED or not _is_group(chat):
            return
        limiter = self._group(chat)
        if limiter is None:
            return
        self._group_waiting[chat] = self._group_waiting.get(chat, 0) + 1
        try:
            await limiter.acquire()
        finally:
            left = self._group_waiting[chat] - 1
            if left:
                self._group_waiting[chat] = left
            else:
                del self._group_waiting[chat]

    async def _take_overall(self, endpoint: str) -> bool:
        """One unit of the overall budget; False: a "typing" dropped instead (see module)."""
        limiter = self._overall
        if limiter is None:
            return True
        if endpoint not in COSMETIC:
            self._waiting += 1
            try:
                await limiter.acquire()
            finally:
                self._waiting -= 1
            return True
        # nor the budget's last half (see the module: the ack waits, "typing" is dropped)
        if endpoint == "sendChatAction":
            if (self._cosmetic_turn.locked() or self._waiting
                    or not limiter.has_capacity(1 + self._reserve)):
                self.dropped_typing += 1
                return False
            await limiter.acquire()
            return True
        # Waiting acks take turns: only the first looks at the budget each slot, the others
        # sleep on the lock (50 acks under load woke 50 times a slot, ~1,500 a second). The
        # budget comes back with time, so there is no event to wait on.
        async with self._cosmetic_turn:
            while self._waiting or not limiter.has_capacity(1 + self._reserve):  # noqa: ASYNC110
                await asyncio.sleep(self._slot_s)
            await limiter.acquire()
        return True

    async def _wait_for_chat(self, chat: str | None) -> None:
        while chat is not None:
            delay = self._held_until.get(chat, 0.0) - time.monotonic()
            if delay <= 0:
                return
            await asyncio.sleep(delay)

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, bool | JSONDict | list[JSONDict]]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> bool | JSONDict | list[JSONDict]:
        raw_chat = data.get("chat_id")
        chat = None if raw_chat is None else str(raw_chat)
        retries = self.max_retries if rate_limit_args is None else rate_limit_args
        for attempt in range(retries + 1):
            await self._wait_for_chat(chat)
            try:
                await self._take_group(chat, endpoint)
                if not await self._take_overall(endpoint):
                    return True  # the Bot API's answer to sendChatAction
                return await callback(*args, **kwargs)
            except RetryAfter as exc:
                delay = retry_after_seconds(exc)
                self.hits.append((chat or "", delay))
                if chat is not None:
                    # Only this chat waits; other chats' requests go on.
                    until = time.monotonic() + delay + 0.05
                    self._held_until[chat] = max(self._held_until.get(chat, 0.0), until)
                if attempt == retries or delay > self.max_retry_after_s:
                    raise
                log.info("telegram.rate_limited", chat=chat, retry_after=delay,
                         endpoint=endpoint)
                self._on_retry()
                if chat is None:
                    await asyncio.sleep(delay)
        raise AssertionError("unreachable")


# -- the transport ---------------------------------------------------------------------------


HttpBackend = Literal["aiohttp", "httpx"]

_JSON_HEADERS = {"Content-Type": "application/json"}


class AiohttpRequest(BaseRequest):
    """PTB's ``BaseRequest`` on one ``aiohttp.ClientSession``.

    The session is created by :meth:`initialize` and closed by :meth:`shutdown`; the pair can
    be repeated. Timeouts follow ``HTTPXRequest`` (same defaults; ``None`` means no limit),
    mapped onto ``aiohttp.ClientTimeout``:

    * ``read_timeout`` → ``sock_read``: the longest gap between bytes of the response, as in
      httpx. aiohttp starts it once the request body is written.
    * ``connect_timeout`` → ``sock_connect``; ``connect_timeout + pool_timeout`` →
      ``connect`` (aiohttp's single budget for waiting for a pooled connection *and* opening
      a new one; no limit if either is ``None``).
    * ``write_timeout``: aiohttp has no per-write timeout. A body without files fits in the
      socket buffer, so it is not enforced there; an upload (files) is instead bounded as a
      whole by ``total = pool + connect + write + read`` when all four are finite. As in
      ``HTTPXRequest``, uploads default to ``media_write_timeout``.

    Proxies and HTTP/2 are not supported (use ``HTTPXRequest``).

    Args:
        connection_pool_size: the most connections open at once (``TCPConnector(limit=...)``).
        read_timeout: default seconds; see above.
        write_timeout: default seconds for requests without files.
        connect_timeout: default seconds to open a connection.
        pool_timeout: default seconds to wait for a free connection when all are busy.
        media_write_timeout: default write timeout for requests that upload files.
    """

    __slots__ = (
        "_connect_timeout",
        "_media_write_timeout",
        "_pool_size",
        "_pool_timeout",
        "_read_timeout",
        "_session",
        "_write_timeout",
    )

    def __init__(
        self,
        *,
        connection_pool_size: int = 256,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 1.0,
        media_write_timeout: float | None = 20.0,
    ) -> None:
        if connection_pool_size < 1:
            raise ValueError("connection_pool_size must be at least 1")
        self._pool_size = connection_pool_size
        self._read_timeout = read_timeout
        self._write_timeout = write_timeout
        self._connect_timeout = connect_timeout
        self._pool_timeout = pool_timeout
        self._media_write_timeout = media_write_timeout
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float | None:
        """The default read timeout (see :attr:`BaseRequest.read_timeout`)."""
        return self._read_timeout

    async def initialize(self) -> None:
        """Open the session (a no-op while one is open)."""
        ssl_context = await asyncio.to_thread(_ssl_context)  # reads CA files: off the loop
        # No await between the check and the assignment: concurrent calls open one session.
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._pool_size, ssl=ssl_context),
                headers={"User-Agent": self.USER_AGENT},
                timeout=aiohttp.ClientTimeout(),  # per request, see _timeout
                trust_env=False,  # no proxies from the environment: not supported here
            )

    async def shutdown(self) -> None:
        """Close the session and its connections (a no-op when closed)."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        """See :meth:`BaseRequest.do_request`.

        Raises:
            TimedOut: a timeout, including waiting for a pooled connection.
            NetworkError: the connection failed.
            RuntimeError: not initialized (PTB reports it as a ``NetworkError``).
        """
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        files = request_data is not None and request_data.contains_files
        timeout = self._timeout(
            read_timeout, write_timeout, connect_timeout, pool_timeout, files=files
        )
        data: aiohttp.FormData | bytes | None = None
        headers = None
        if request_data is not None:
            if files:
                data = _multipart(request_data)
            elif params := request_data.parameters:
                # One JSON body (the Bot API takes application/json): a single dumps instead
                # of PTB's per-value encoding plus URL-encoding of the form HTTPXRequest sends.
                data = json.dumps(params, ensure_ascii=False).encode()
                headers = _JSON_HEADERS
        try:
            async with session.request(
                method, url, data=data, headers=headers, timeout=timeout
            ) as response:
                return response.status, await response.read()
        except aiohttp.ConnectionTimeoutError as exc:
            raise TimedOut(
                "Connect or pool timeout: no connection within the connect + pool timeouts "
                "(all pooled connections busy, or the host did not answer). The request was "
                "*not* sent to Telegram."
            ) from exc
        except TimeoutError as exc:  # includes aiohttp.ServerTimeoutError (a socket read)
            raise TimedOut(f"Timed out ({exc.__class__.__name__}: {exc})") from exc
        except aiohttp.ClientError as exc:
            # The class name helps when the message is empty (as in HTTPXRequest).
            raise NetworkError(f"aiohttp.{exc.__class__.__name__}: {exc}") from exc

    def _timeout(
        self,
        read: ODVInput[float],
        write: ODVInput[float],
        connect: ODVInput[float],
        pool: ODVInput[float],
        *,
        files: bool,
    ) -> aiohttp.ClientTimeout:
        read_s = self._read_timeout if isinstance(read, DefaultValue) else read
        connect_s = self._connect_timeout if isinstance(connect, DefaultValue) else connect
        pool_s = self._pool_timeout if isinstance(pool, DefaultValue) else pool
        write_s: float | None
        if isinstance(write, DefaultValue):
            write_s = self._media_write_timeout if files else self._write_timeout
        else:
            write_s = write
        acquire = None if connect_s is None or pool_s is None else connect_s + pool_s
        total = None
        if files and acquire is not None and write_s is not None and read_s is not None:
            total = acquire + write_s + read_s
        return aiohttp.ClientTimeout(
            total=total, connect=acquire, sock_connect=connect_s, sock_read=read_s
        )


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=certifi.where())
    context.set_alpn_protocols(["http/1.1"])
    return context


def _multipart(request_data: RequestData) -> aiohttp.FormData:
    # Fields first, then files, as httpx orders them. quote_fields=False: names and file names
    # go out as UTF-8 with quotes escaped, like httpx (aiohttp would %-encode file names).
    form = aiohttp.FormData(quote_fields=False, default_to_multipart=True)
    for name, value in request_data.json_parameters.items():
        form.add_field(name, value)
    for name, (filename, content, mime) in request_data.multipart_data.items():
        form.add_field(name, content, filename=filename, content_type=mime)
    return form


def build_request(
    backend: HttpBackend,
    *,
    connection_pool_size: int,
    read_timeout: float | None = 5.0,
    write_timeout: float | None = 5.0,
    connect_timeout: float | None = 5.0,
    pool_timeout: float | None = 1.0,
) -> BaseRequest:
    """The ``BaseRequest`` for ``[channels.telegram] http_backend``, same timeouts either way."""
    if backend == "httpx":
        return HTTPXRequest(
            connection_pool_size=connection_pool_size, read_timeout=read_timeout,
            write_timeout=write_timeout, connect_timeout=connect_timeout,
            pool_timeout=pool_timeout,
        )
    return AiohttpRequest(
        connection_pool_size=connection_pool_size, read_timeout=read_timeout,
        write_timeout=write_timeout, connect_timeout=connect_timeout, pool_timeout=pool_timeout,
    )
