"""Telegram's inbound half: updates turned into neutral events and recorded before they are
confirmed, by long polling (the offset moves in the same transaction as the events) or by
the webhook (answered 200 only after the record). See :mod:`bots.telegram.connector`.
"""

from __future__ import annotations

import asyncio
import hmac
import random
from typing import Any

import structlog
from aiohttp import web
from telegram.error import Conflict, NetworkError, RetryAfter, TimedOut

from bots.connector import BaseConnector
from bots.events import InboundEvent
from bots.telegram._convert import convert_update, update_key
from bots.telegram._ratelimit import retry_after_seconds
from bots.telegram.client import _Bot
from bots.telegram.options import TelegramOptions
from geode.errors import ConfigError

__all__ = ["ALLOWED_UPDATES", "TelegramInbound"]

log = structlog.get_logger(__name__)

ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]


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
