"""The Telegram client: what the layer sends through (send / edit / react / upload / typing),
with the ``ApprovalControls`` (inline keyboards, ``answerCallbackQuery``) and
``AttachmentReader`` abilities; not ``ReadBack`` (the Bot API reads no history). Telegram
errors become :class:`~bots.port.DeliveryError` kinds in one place, :func:`_map_error`.

A mixin of :class:`~bots.telegram.connector.TelegramConnector`: it reads the bot the
connector builds at connect; it holds nothing of the intake.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from telegram import InputFile, ReplyParameters
from telegram.error import (
    BadRequest,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.ext import ExtBot

from bots._download import TOO_LARGE, stream_to_file, telegram_file_url
from bots.events import Attachment, InboundEvent, ReplyTarget
from bots.format import Chunk
from bots.port import AttachmentRefused, DeliveryError
from bots.telegram._convert import approval_keyboard
from bots.telegram._ratelimit import retry_after_seconds

__all__ = ["CAPTION_LIMIT", "DOCUMENT_LIMIT_MB", "PHOTO_LIMIT_MB", "TelegramClient"]

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
        ``callback_query`` (``_convert``), answered by :meth:`answer_action`."""
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
        """``sendPhoto`` (``image``) or ``sendDocument``, in the thread as :meth:`send`
        replies (topic, reply to the message that asked)."""
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
