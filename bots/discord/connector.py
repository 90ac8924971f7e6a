"""The Discord connector, on discord.py's gateway client: a lifecycle over two halves.

- inbound (:mod:`bots.discord.inbound`): gateway payloads and interactions converted and
  recorded durably before they are acknowledged, and the catch-up after every READY /
  RESUMED;
- client (:mod:`bots.discord.client`): send / edit / react / upload / typing, plus the
  optional abilities (approval buttons, reading a thread back after a crash);
- render (:mod:`bots.discord.format`): Markdown kept as Markdown, split with code fences
  balanced.

discord.py keeps the gateway session (HELLO, heartbeats, RESUME after a drop, a fresh
IDENTIFY when the session is invalid); :mod:`bots.discord._gateway` holds the client both
halves share. Only messages of bound channels (and their threads) are recorded: a bot in a
large guild must not store every channel's traffic. A message is never lost (a channel's
cursor moves only with a durable record) and never processed twice (unique per-message key).

Every replica records and processes (each thread on the replica holding its thread lease,
see ``bots.store.leases``); the start-up catch-up runs on the holder of the store lease
``discord:<bot id>``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import discord
import structlog

from bots._aio import reap
from bots.connector import BaseConnector, PlatformUnreachableError
from bots.discord._gateway import Endpoints, GatewayClient, Link, run_gateway
from bots.discord.client import NO_MENTIONS, DiscordClient
from bots.discord.format import DISCORD_LIMIT, chunk_fenced_markdown, render_progress
from bots.discord.inbound import DISCORD_CDN_HOSTS, DiscordInbound
from bots.discord.options import DiscordOptions
from bots.events import Attachment, InboundEvent, ReplyTarget
from bots.format import Chunk
from bots.port import TurnHost
from geode.errors import ConfigError
from geode.settings import BindingSettings

__all__ = ["DISCORD_CDN_HOSTS", "DiscordConnector", "DiscordOptions"]

log = structlog.get_logger(__name__)
# GEODE never joins voice: discord.py's "PyNaCl/davey not installed" warnings are noise.
discord.VoiceClient.warn_nacl = False
discord.VoiceClient.warn_dave = False


class DiscordConnector(BaseConnector):
    """Discord via discord.py. See the module docstring.

    Args:
        host: the daemon.
        token: the bot token (from ``Secrets``).
        bindings: configured bindings (non-Discord ones are dropped).
        options: ``[channels.discord]``.
        fault: test seam, called at named points of the pipeline.
    """

    platform = "discord"
    text_limit = DISCORD_LIMIT

    def __init__(
        self,
        *,
        host: TurnHost,
        token: str,
        bindings: Sequence[BindingSettings] = (),
        options: DiscordOptions | None = None,
        fault: Callable[[str], None] | None = None,
    ) -> None:
        opts = options or DiscordOptions()
        super().__init__(host=host, bindings=bindings, options=opts, fault=fault)
        self.opts = opts
        self.token = token
        self.link = Link()
        self.inbound = DiscordInbound(link=self.link, options=opts, intake=lambda: self.intake,
                                      submit=self._record)
        self.out = DiscordClient(link=self.link, options=opts, render=self.render)
        self._endpoints = Endpoints()
        self._tasks: list[asyncio.Task[Any]] = []

    # -- identity --------------------------------------------------------------------------

    @property
    def client(self) -> GatewayClient | None:
        """discord.py's client (None until connected)."""
        return self.link.client

    @property
    def bot_id(self) -> str:
        return self.link.bot_id

    @property
    def app_id(self) -> str:
        return self.link.app_id

    @property
    def catch_ups(self) -> int:
        """Catch-ups run so far (tests wait on it)."""
        return self.inbound.catch_ups

    def bot_user_id(self) -> str | None:
        return self.link.bot_id or None

    def bot_username(self) -> str | None:
        return self.link.username or None

    def cursor_name(self, channel_id: str) -> str:
        return self.inbound.cursor_name(channel_id)

    def render(self, markdown: str) -> list[Chunk]:
        return chunk_fenced_markdown(markdown, limit=self.text_limit)

    def render_progress(self, text: str) -> Chunk:
        return render_progress(text)

    # -- lifecycle -------------------------------------------------------------------------

    async def connect(self) -> None:
        o = self.opts
        self._endpoints.point(api_base=o.api_base, gateway_url=o.gateway_url)
        intents = discord.Intents.none()
        intents.guilds = True
        intents.guild_messages = True
        intents.message_content = True
        intents.dm_messages = True  # /console in a direct message (bots.console.chat_command)
        client = self.link.client = GatewayClient(
            on_up=self.inbound.on_gateway_ready, on_interaction=self.inbound.on_interaction,
            identify_delay_s=o.identify_delay_s, global_per_s=o.rate_global_per_s, intents=intents,
            guild_ready_timeout=o.guild_ready_timeout_s, max_messages=None,
            chunk_guilds_at_startup=False, member_cache_flags=discord.MemberCacheFlags.none(),
            max_ratelimit_timeout=o.max_ratelimit_timeout_s, allowed_mentions=NO_MENTIONS,
        )
        try:
            await client.login(self.token)
        except discord.LoginFailure as exc:  # 401 on /users/@me: the token is wrong
            await self._close_client()
            self.link.client = None
            raise ConfigError(
                f"Discord rejected the bot token in ${o.token_env}. Copy it again from the "
                "Developer Portal (Bot -> Reset Token) into the environment or $GEODE_HOME/.env."
            ) from exc
        except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
            # network, timeout, 5xx: not configuration; the connector retries with backoff
            await self._close_client()
            self.link.client = None
            raise PlatformUnreachableError(
                f"cannot reach the Discord API at {o.api_base} ({exc}). Check the network, "
                "or [channels.discord] api_base."
            ) from exc
        user = client.user
        assert user is not None
        self.link.bot_id, self.link.username = str(user.id), user.name
        self.link.app_id = str(client.application_id or user.id)
        self.workspace = self.link.bot_id
        self.inbound.wrap_parser()
        # Under the connector's supervisor: a death is logged and restarted with backoff.
        # The gateway runs ``once``: it returns only when it gave up for good (a rejected
        # token at IDENTIFY, a missing intent), which it logs itself.
        sup = self.supervisor
        sup.spawn("discord.queue", lambda _c: self.inbound.run())
        sup.spawn("discord.gateway", lambda _c: self._gateway(), once=True)
        self._tasks = [t for t in (sup.task("discord.queue"), sup.task("discord.gateway"))
                       if t is not None]
        self._tasks.append(
            self.start_supervisor(lease_name=f"discord:{self.link.bot_id}", ttl_s=o.lease_ttl_s))
        # the slash commands, beside the start (never holding it up): read, and written only
        # where a guild's differ, so a restart or a second replica writes nothing
        self._tasks.append(asyncio.create_task(self._register_commands(),
                                               name="discord.commands"))

    async def _register_commands(self) -> None:
        """The guilds of the configured Discord bindings get the thread commands as slash
        commands (``bots.discord.commands_sync``); a failure is logged, the bot serves on."""
        from bots.discord.commands_sync import bound_guilds, register

        client = self.link.client
        if client is None or not self.bindings:
            return
        try:
            guilds = await bound_guilds(client.http, [b.channel for b in self.bindings])
            lines = await register(client.http, int(self.link.app_id), guilds)
            log.info("discord.commands_checked", guilds=lines)
        except Exception as exc:
            log.warning("discord.commands_not_registered", error=str(exc)[:200])

    @property
    def ready(self) -> bool:
        """Started, and the gateway session is up: until READY nothing arrives (discord.py
        waits ``guild_ready_timeout_s`` for the guilds first), and after a rejected token or
        a missing intent nothing ever will."""
        return super().ready and self.link.gateway_up

    async def disconnect(self) -> None:
        for task in reversed(self._tasks):
            if task.get_name() != "discord.gateway":
                await reap(task)
        for task in self.inbound.spawned():  # catch-ups: they record, they do not process
            await reap(task)
        await self.release_processing()
        for pending in self.out.inflight():  # shielded REST calls still running
            if isinstance(pending, asyncio.Task):
                await reap(pending)
        await self._close_client()
        for task in self._tasks:
            await reap(task)
        self._tasks = []
        self._endpoints.restore()

    async def _close_client(self) -> None:
        if self.link.client is not None:
            with contextlib.suppress(Exception):
                await self.link.client.close()

    async def _gateway(self) -> None:
        """Run discord.py's gateway loop (it RESUMEs / re-IDENTIFYs by itself)."""
        try:
            await run_gateway(self.link.http(), token_env=self.opts.token_env)
        finally:
            self.link.gateway_up = False  # it gave up (or was stopped): nothing arrives now

    # -- inbound ---------------------------------------------------------------------------

    async def _record(self, events: Sequence[tuple[InboundEvent, str]], *,
                      cursor: tuple[str, str] | None = None) -> list[int]:
        # looked up at each call: a test counts the records by replacing ``submit``
        return await self.submit(events, cursor=cursor)

    async def ingest(self, payloads: list[dict[str, Any]]) -> None:
        """Convert and record payloads; each channel's events with its cursor, atomically."""
        await self.inbound.ingest(payloads)

    async def catch_up(self) -> None:
        """Record what bound channels and their active threads got after their cursors."""
        if self.link.client is None or self.layer is None:
            return
        await self.inbound.catch_up()

    async def fetch_thread_history(self, event: InboundEvent) -> list[InboundEvent]:
        return await self.inbound.fetch_thread_history(event)

    async def download(self, attachment: Attachment, dest: Path, *, max_bytes: int) -> int:
        return await self.inbound.download(attachment, dest, max_bytes=max_bytes)

    # -- client ----------------------------------------------------------------------------

    async def send(self, target: ReplyTarget, chunk: Chunk, *, plain: bool = False) -> str:
        return await self.out.send(target, chunk, plain=plain)

    async def edit(
        self, target: ReplyTarget, message_id: str, chunk: Chunk, *, plain: bool = False
    ) -> None:
        await self.out.edit(target, message_id, chunk, plain=plain)

    async def react(self, target: ReplyTarget, message_id: str, emoji: str | None) -> None:
        await self.out.react(target, message_id, emoji)

    async def typing(self, target: ReplyTarget) -> None:
        await self.out.typing(target)

    def upload_limit(self, *, image: bool) -> int:
        return self.out.upload_limit(image=image)

    async def post_file(
        self, target: ReplyTarget, *, filename: str, data: bytes, caption: str | None,
        image: bool,
    ) -> str:
        return await self.out.post_file(target, filename=filename, data=data, caption=caption,
                                        image=image)

    async def send_approval(self, target: ReplyTarget, chunk: Chunk, *, short_id: str) -> str:
        return await self.out.send_approval(target, chunk, short_id=short_id)

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        await self.out.answer_action(event, text)

    async def find_upload(
        self, target: ReplyTarget, *, filename: str, size: int, since: datetime
    ) -> str | None:
        return await self.out.find_upload(target, filename=filename, size=size, since=since)

    async def find_progress(self, target: ReplyTarget, *, since: datetime) -> list[str]:
        return await self.out.find_progress(target, since=since)

    async def find_approval(
        self, target: ReplyTarget, *, short_id: str, since: datetime
    ) -> str | None:
        return await self.out.find_approval(target, short_id=short_id, since=since)
