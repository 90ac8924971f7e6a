"""The Telegram connector, on python-telegram-bot's ``ExtBot``.

Intake (one of):

* **long polling** (default): ``getUpdates`` with the offset kept in the store. A batch is
  recorded (events + new offset in one transaction) *before* the next ``getUpdates``
  confirms it to Telegram, so a crash loses nothing and replays nothing. Only the holder of
  the store lease ``telegram:<bot id>`` polls: a second ``geode serve`` on the same token
  waits as a standby for polling instead of fighting over ``getUpdates`` (409), and
  processes like the first (each thread on the replica holding its thread lease).
* **webhook**: an aiohttp endpoint checks ``X-Telegram-Bot-Api-Secret-Token`` (constant
  time), records the update, and only then answers 200 (a failure answers 500, and
  Telegram redelivers).

Pending updates are never dropped at start: the backlog is the catch-up (bounded by
``catch_up_max_age_s``). Rate limits: :class:`~bots.telegram._ratelimit.PerChatRateLimiter`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web
from telegram import InputFile, ReplyParameters
from telegram.error import (
    BadRequest,
    Conflict,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.ext import ExtBot

from bots._aio import reap
from bots._download import TOO_LARGE, stream_to_file, telegram_file_url
from bots.connector import BaseConnector, PlatformUnreachableError
from bots.events import Attachment, InboundEvent, ReplyTarget
from bots.format import Chunk
from bots.port import AttachmentRefused, DeliveryError, TurnHost
from bots.telegram._convert import approval_keyboard, convert_update, update_key
from bots.telegram._ratelimit import PerChatRateLimiter, retry_after_seconds
from bots.telegram._request import build_request
from bots.telegram.format import TELEGRAM_LIMIT, chunk_markdown, render_progress
from bots.telegram.options import TelegramOptions
from geode.errors import ConfigError
from geode.hooks.events import RateLimited
from geode.settings import BindingSettings

__all__ = ["TelegramConnector", "TelegramOptions"]

log = structlog.get_logger(__name__)

ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]
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


class TelegramConnector(BaseConnector):
    """Telegram via python-telegram-bot. See the module docstring.

    Args:
        host: the daemon.
        token: the bot token (from ``Secrets``, never from the config file).
        bindings: configured bindings (non-Telegram ones are dropped).
        options: ``[channels.telegram]``.
        webhook_secret: the ``secret_token`` Telegram must send (webhook mode).
        fault: test seam, called at named points of the pipeline.
    """

    platform = "telegram"
    text_limit = TELEGRAM_LIMIT

    def __init__(
        self,
        *,
        host: TurnHost,
        token: str,
        bindings: Sequence[BindingSettings] = (),
        options: TelegramOptions | None = None,
        webhook_secret: str | None = None,
        fault: Callable[[str], None] | None = None,
    ) -> None:
        opts = options or TelegramOptions()
        super().__init__(host=host, bindings=bindings, options=opts, fault=fault)
        self.opts = opts
        self.token = token
        self.webhook_secret = webhook_secret
        self.bot: _Bot | None = None
        self.rate_limiter = PerChatRateLimiter(
            overall_max_rate=opts.rate_overall_per_s, group_max_rate=opts.rate_group_per_min,
            max_retry_after_s=opts.max_retry_after_s, on_retry=self._rate_limited,
        )
        self.bot_id = ""
        self.username = ""
        self.polls = 0
        self._main: asyncio.Task[None] | None = None
        self._web: web.AppRunner | None = None

    def _rate_limited(self) -> None:
        # the daemon's metrics (geode_channel_rate_limited_total)
        self.host.publish(RateLimited(platform=self.platform))

    # -- identity -----------------------------------------------------------------------------

    def bot_user_id(self) -> str | None:
        return self.bot_id or None

    def bot_username(self) -> str | None:
        return self.username or None

    def render(self, markdown: str) -> list[Chunk]:
        return chunk_markdown(markdown, limit=self.text_limit)

    def render_progress(self, text: str) -> Chunk:
        return render_progress(text)

    @property
    def cursor_name(self) -> str:
        return f"telegram:{self.bot_id}:offset"

    # -- lifecycle ------------------------------------------------------------------------------

    async def connect(self) -> None:
        o = self.opts
        self.bot = _Bot(
            token=self.token, base_url=o.base_url, base_file_url=o.base_file_url,
            request=build_request(o.http_backend, connection_pool_size=o.connection_pool_size,
                                  read_timeout=20.0, write_timeout=20.0, connect_timeout=5.0,
                                  pool_timeout=30.0),
            get_updates_request=build_request(o.http_backend, connection_pool_size=2,
                                              read_timeout=o.poll_timeout_s + 10.0),
            rate_limiter=self.rate_limiter,
        )
        try:
            await self.bot.initialize()
            self.bot_id = str(self.bot.id)
            self.username = self.bot.username or ""
            self.workspace = self.bot_id
            if o.mode == "webhook":
                await self._start_webhook()
        except BaseException as exc:
            # Nothing of this attempt stays open (its HTTP sessions: no "Unclosed client
            # session"); the next attempt builds its own.
            await self._close_attempt()
            if isinstance(exc, InvalidToken):  # 401 / 404 on getMe: the token is wrong
                raise ConfigError(
                    f"Telegram rejected the bot token in ${o.token_env}. Copy it again from "
                    "@BotFather (/token) into the environment or $GEODE_HOME/.env."
                ) from exc
            if isinstance(exc, TelegramError):  # network, timeout, 5xx: retried
                raise PlatformUnreachableError(
                    f"cannot reach the Telegram Bot API at {o.base_url} ({exc}). Check the "
                    "network, or [channels.telegram] base_url."
                ) from exc
            raise
        # Only the lease holder polls: a second poller would fight over getUpdates (409).
        work = self._poll_loop if o.mode == "polling" else None  # webhook: the web server
        # the poller beats on every getUpdates answer (a long poll lasts poll_timeout_s)
        self._main = self.start_supervisor(
            lease_name=f"telegram:{self.bot_id}", ttl_s=o.lease_ttl_s, work=work,
            stale_after_s=o.poll_timeout_s + 30.0 + o.lease_ttl_s if work else None)

    async def _close_attempt(self) -> None:
        if self._web is not None:
            with contextlib.suppress(Exception):
                await self._web.cleanup()
            self._web = None
        if self.bot is not None:
            with contextlib.suppress(Exception):
                await self.bot.shutdown()
            self.bot = None

    async def disconnect(self) -> None:
        await reap(self._main)
        self._main = None
        if self._web is not None:
            await self._web.cleanup()
            self._web = None
        await self.release_processing()
        if self.bot is not None:
            with contextlib.suppress(Exception):
                await self.bot.shutdown()

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
            self.intake_health.beat("polling")
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
        await self.submit(events, cursor=cursor)
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
            await self.submit(events)
        except Exception:
            log.exception("telegram.webhook_record_failed")
            return web.Response(status=500, text="not recorded; retry")
        return web.Response(status=200, text="ok")

    # -- sending --------------------------------------------------------------------------------

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
