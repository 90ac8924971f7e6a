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

The connector is four parts: :mod:`bots.telegram.inbound` (conversion and intake: the
poller, the webhook), :mod:`bots.telegram.client` (send / edit / react / upload / typing and
the optional abilities, with the pacing and the HTTP transport a send goes through),
:mod:`bots.telegram.format` (render: Telegram's dialect of the shared renderer) and this
module's glue (the bot, connect / disconnect, the intake lease).

Pending updates are never dropped at start: the backlog is the catch-up (bounded by
``catch_up_max_age_s``). Rate limits: :class:`~bots.telegram.client.PerChatRateLimiter`.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

import structlog
from aiohttp import web
from telegram.error import InvalidToken, TelegramError

from bots._aio import reap
from bots.connector import PlatformUnreachableError
from bots.observed import RateLimited
from bots.port import TurnHost
from bots.telegram.client import PerChatRateLimiter, TelegramClient, _Bot, build_request
from bots.telegram.format import TelegramRenderer
from bots.telegram.inbound import TelegramInbound
from bots.telegram.options import TelegramOptions
from geode.errors import ConfigError
from geode.settings import BindingSettings

__all__ = ["TelegramConnector", "TelegramOptions"]

log = structlog.get_logger(__name__)


class TelegramConnector(TelegramRenderer, TelegramClient, TelegramInbound):
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
        """A 429 the rate limiter slept off: told to the daemon's observers, and counted
        (``geode_channel_rate_limited_total``) on the counters the daemon gave this
        connector's layer (none before :meth:`start` built it)."""
        self.host.publish(RateLimited(platform=self.platform))
        if self.layer is not None:
            self.layer.metrics.rate_limited.labels(platform=self.platform).inc()

    # -- identity -----------------------------------------------------------------------------

    def bot_user_id(self) -> str | None:
        return self.bot_id or None

    def bot_username(self) -> str | None:
        return self.username or None

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
            await self._register_commands()
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

    async def _register_commands(self) -> None:
        """The command menu (``setMyCommands``) for private chats and for groups, written only
        where it differs from what Telegram holds: a restart (or a second replica) reads
        and writes nothing more (the peers' 429 lockouts came from writing on every boot).
        A failure is logged; the bot serves without a menu."""
        from telegram import (
            BotCommand,
            BotCommandScopeAllGroupChats,
            BotCommandScopeAllPrivateChats,
        )

        from bots.command_menu import menu

        assert self.bot is not None
        for scope, private in ((BotCommandScopeAllPrivateChats(), True),
                               (BotCommandScopeAllGroupChats(), False)):
            wanted = [BotCommand(c.name, c.description) for c in menu(private=private)]
            try:
                held = await self.bot.get_my_commands(scope=scope)
                if [(c.command, c.description) for c in held] != [
                        (c.command, c.description) for c in wanted]:
                    await self.bot.set_my_commands(wanted, scope=scope)
                    log.info("telegram.commands_registered", scope=scope.type,
                             count=len(wanted))
            except TelegramError as exc:
                log.warning("telegram.commands_not_registered", scope=scope.type,
                            error=str(exc)[:200])

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
