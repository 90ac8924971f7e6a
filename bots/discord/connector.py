"""The Discord connector, on discord.py's gateway client.

Intake: discord.py keeps the gateway session (HELLO, heartbeats, RESUME after a drop, a
fresh IDENTIFY when the session is invalid). Its ``MESSAGE_CREATE`` parser is wrapped so
that each raw payload is queued, in gateway order, before discord.py parses it (a payload
discord.py cannot parse is still logged and skipped, never fatal to the connection). One
intake task converts queued payloads and records them durably, each channel's batch in one
transaction with that channel's cursor (the last recorded message id). Only messages of
bound channels (and their threads) are recorded: a bot in a large guild must not store
every channel's traffic.

Catch-up: after every READY (first start, and the re-IDENTIFY after INVALID_SESSION) and
every RESUMED, the history of each bound channel and of its active threads after the
persisted cursor (minus a small overlap) is read and recorded; the unique per-message key
makes the overlap and the live/catch-up race harmless. So a message is never lost (the
cursor moves only with a durable record) and never processed twice (unique key).

Every replica records and processes (each thread on the replica holding its thread lease,
see ``bots.store.leases``); the start-up catch-up runs on the holder of the store lease
``discord:<bot id>``.

Replies: a mention in a channel starts a thread on that message (the thread has the
message's id, so the session id is the same before and after); where threads are not
allowed (``reply_mode = "inline"``, or creation refused with 403 / 50013) the bot replies
in place and the reply chain is the thread. 429s are handled by discord.py's own rate
limiter (``max_ratelimit_timeout_s`` bounds a single wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import random
import re
import time
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import discord
import discord.gateway
import discord.http
import structlog
import yarl

from bots._aio import reap
from bots._download import check_url, stream_to_file
from bots.commands import COMMANDS
from bots.connector import BaseConnector, PlatformUnreachableError
from bots.discord._convert import (
    approval_components,
    convert_message,
    parse_action,
    snowflake,
    snowflake_seconds,
)
from bots.discord._history import fetch_thread_history
from bots.discord.format import DISCORD_LIMIT, chunk_fenced_markdown, render_progress
from bots.discord.options import DiscordOptions
from bots.events import Attachment, InboundEvent, ReplyTarget
from bots.format import Chunk
from bots.port import AttachmentRefused, DeliveryError, TurnHost
from geode.errors import ConfigError
from geode.settings import BindingSettings

#: Discord's attachment CDN hosts (the signed URLs the gateway gives point there)
DISCORD_CDN_HOSTS = ("https://cdn.discordapp.com", "https://media.discordapp.net")

__all__ = ["DiscordConnector", "DiscordOptions"]

log = structlog.get_logger(__name__)
# GEODE never joins voice: discord.py's "PyNaCl/davey not installed" warnings are noise.
discord.VoiceClient.warn_nacl = False
discord.VoiceClient.warn_dave = False

T = TypeVar("T")
_THREAD_TYPES = (10, 11, 12)
_NO_MENTIONS = discord.AllowedMentions.none()



class _Client(discord.Client):
    """discord.Client with the connector's hooks (ready, resumed, interactions)."""

    def __init__(self, *, connector: DiscordConnector, identify_delay_s: float,
                 **kw: Any) -> None:
        super().__init__(**kw)
        self._geode = connector
        self._identify_delay_s = identify_delay_s
        _throttle_bucket_sweeps(self.http)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        if not initial and self._identify_delay_s > 0:
            await asyncio.sleep(self._identify_delay_s)

    async def on_ready(self) -> None:
        self._geode.on_gateway_ready("ready")

    async def on_resumed(self) -> None:
        self._geode.on_gateway_ready("resumed")

    async def on_interaction(self, interaction: discord.Interaction[Any]) -> None:
        await self._geode.on_interaction(interaction)

    async def on_error(self, event_method: str, /, *args: Any, **kwargs: Any) -> None:
        log.exception("discord.handler_failed", handler=event_method)


#: the most often discord.py may sweep its rate-limit buckets for inactive ones
BUCKET_SWEEP_EVERY_S = 30.0


def _throttle_bucket_sweeps(http: Any, *, every_s: float = BUCKET_SWEEP_EVERY_S) -> None:
    """Let discord.py sweep its rate-limit bucket table at most every ``every_s`` seconds.

    Once it holds 256 buckets, discord.py scans the whole table for inactive ones (idle for
    300 s) each time it makes a new bucket. Every Discord thread is a channel with buckets
    of its own (send, edit, react), so a bot answering in many new threads scanned the whole
    table three times per reply, a cost growing with every thread (~0.4 ms of CPU per reply
    at 2,000 buckets, a few minutes of a busy server). Throttled, the table still loses its
    inactive buckets, at most ``every_s`` later than it would have.
    """
    sweep = getattr(http, "_try_clear_expired_ratelimits", None)
    if sweep is None:  # a discord.py without it: nothing to throttle
        return
    last = -every_s

    def throttled() -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= every_s:
            last = now
            sweep()

    http._try_clear_expired_ratelimits = throttled


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
        self.client: _Client | None = None
        self.bot_id = ""
        self.username = ""
        self.app_id = ""
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[Any]] = []
        self._spawned: set[asyncio.Task[Any]] = set()
        self._inflight: set[asyncio.Future[Any]] = set()
        self._catch_up_lock = asyncio.Lock()
        #: the gateway said READY (or RESUMED) and has not failed for good since
        self._gateway_up = False
        #: channel id -> parent channel id ("" = not a thread)
        self._parents: dict[str, str] = {}
        #: channel id -> highest message id recorded with its cursor
        self._cursors: dict[str, int] = {}
        self._threads: set[str] = set()  # roots whose thread exists
        self._inline: set[str] = set()  # roots answered in place (threads refused)
        self._where_sent: dict[str, str] = {}  # message id -> channel it was posted in
        self._saved_routes: tuple[str, Any] | None = None
        self.catch_ups = 0

    # -- identity ----------------------------------------------------------------------------------

    def bot_user_id(self) -> str | None:
        return self.bot_id or None

    def bot_username(self) -> str | None:
        return self.username or None

    def cursor_name(self, channel_id: str) -> str:
        return f"discord:{self.bot_id}:ch:{channel_id}"

    def render(self, markdown: str) -> list[Chunk]:
        return chunk_fenced_markdown(markdown, limit=self.text_limit)

    def render_progress(self, text: str) -> Chunk:
        return render_progress(text)

    # -- lifecycle ---------------------------------------------------------------------------------

    def _point_discord_py_at_endpoints(self) -> None:
        # discord.py reads both from class attributes (process-wide): one Discord connector
        # per process, restored on disconnect.
        route, ws = discord.http.Route, discord.gateway.DiscordWebSocket
        if self._saved_routes is None:  # a retried connect keeps the originals saved
            self._saved_routes = (route.BASE, ws.DEFAULT_GATEWAY)
        route.BASE = self.opts.api_base.rstrip("/")
        ws.DEFAULT_GATEWAY = yarl.URL(self.opts.gateway_url)

    def _restore_endpoints(self) -> None:
        if self._saved_routes is not None:
            discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = (
                self._saved_routes)
            self._saved_routes = None

    async def connect(self) -> None:
        o = self.opts
        self._point_discord_py_at_endpoints()
        intents = discord.Intents.none()
        intents.guilds = True
        intents.guild_messages = True
        intents.message_content = True
        self.client = _Client(
            connector=self, identify_delay_s=o.identify_delay_s, intents=intents,
            guild_ready_timeout=o.guild_ready_timeout_s, max_messages=None,
            chunk_guilds_at_startup=False, member_cache_flags=discord.MemberCacheFlags.none(),
            max_ratelimit_timeout=o.max_ratelimit_timeout_s, allowed_mentions=_NO_MENTIONS,
        )
        try:
            await self.client.login(self.token)
        except discord.LoginFailure as exc:  # 401 on /users/@me: the token is wrong
            await self._close_client()
            self.client = None
            raise ConfigError(
                f"Discord rejected the bot token in ${o.token_env}. Copy it again from the "
                "Developer Portal (Bot -> Reset Token) into the environment or $GEODE_HOME/.env."
            ) from exc
        except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
            # network, timeout, 5xx: not configuration; the connector retries with backoff
            await self._close_client()
            self.client = None
            raise PlatformUnreachableError(
                f"cannot reach the Discord API at {o.api_base} ({exc}). Check the network, "
                "or [channels.discord] api_base."
            ) from exc
        user = self.client.user
        assert user is not None
        self.bot_id, self.username = str(user.id), user.name
        self.app_id = str(self.client.application_id or user.id)
        self.workspace = self.bot_id
        self._wrap_parser()
        # Under the connector's supervisor: a death is logged and restarted with backoff.
        # The gateway runs ``once``: it returns only when it gave up for good (a rejected
        # token at IDENTIFY, a missing intent), which it logs itself.
        sup = self.supervisor
        sup.spawn("discord.queue", lambda _c: self._intake())
        sup.spawn("discord.gateway", lambda _c: self._gateway(), once=True)
        self._tasks = [t for t in (sup.task("discord.queue"), sup.task("discord.gateway"))
                       if t is not None]
        self._tasks.append(
            self.start_supervisor(lease_name=f"discord:{self.bot_id}", ttl_s=o.lease_ttl_s))

    @property
    def ready(self) -> bool:
        """Started, and the gateway session is up: until READY nothing arrives (discord.py
        waits ``guild_ready_timeout_s`` for the guilds first), and after a rejected token or
        a missing intent nothing ever will."""
        return super().ready and self._gateway_up

    async def disconnect(self) -> None:
        for task in reversed(self._tasks):
            if task.get_name() != "discord.gateway":
                await reap(task)
        for task in list(self._spawned):  # catch-ups: they record, they do not process
            await reap(task)
        await self.release_processing()
        for pending in list(self._inflight):  # shielded REST calls still running
            if isinstance(pending, asyncio.Task):
                await reap(pending)
        await self._close_client()
        for task in self._tasks:
            await reap(task)
        self._tasks = []
        self._restore_endpoints()

    async def _close_client(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                await self.client.close()

    async def _gateway(self) -> None:
        """Run discord.py's gateway loop (it RESUMEs / re-IDENTIFYs by itself)."""
        assert self.client is not None
        try:
            await self._run_gateway()
        finally:
            self._gateway_up = False  # it gave up (or was stopped): nothing arrives now

    async def _run_gateway(self) -> None:
        assert self.client is not None
        failures = 0
        while not self.client.is_closed():
            try:
                await self.client.connect(reconnect=True)
                return
            except discord.PrivilegedIntentsRequired:
                log.error("discord.intent_missing", fix="Developer Portal -> Bot -> enable "
                          "MESSAGE CONTENT INTENT, then restart geode serve")
                return
            except discord.ConnectionClosed as exc:
                if exc.code == 4004:
                    log.error("discord.auth_failed", token_env=self.opts.token_env)
                    return
                failures += 1
            except Exception as exc:
                failures += 1
                log.warning("discord.gateway_failed", error=repr(exc))
            if self.client.is_closed():
                return
            # discord.py closes itself on a fatal close code; a closed client cannot
            # reconnect, so a restart of the connector is the operator's call.
            await asyncio.sleep(min(60.0, 0.5 * 2 ** min(failures, 7)) * (0.5 + random.random()))

    async def _rest(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one discord.py REST call to completion even if our caller is cancelled.

        discord.py's per-route rate-limit bucket is not cancellation-safe: a request
        cancelled in its post-request bookkeeping (progress indicators are cancelled
        exactly then, when the final answer replaces them) leaves the bucket exhausted, and
        the next request on that route (the final edit) waits 30 s. Shielded, the request
        always finishes and releases the bucket.

        Refused once the client is closed (a shielded edit still running as the connector
        stops, e.g. a cancelled approval's outcome): discord.py's endpoints are restored
        to Discord's own after that, and the call must not go anywhere.
        """
        if self.client is None or self.client.is_closed():
            coro.close()
            raise DeliveryError("retry", "the Discord connector is stopped")
        task = asyncio.ensure_future(coro)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return await asyncio.shield(task)

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)

    # -- intake ------------------------------------------------------------------------------------

    def _wrap_parser(self) -> None:
        assert self.client is not None
        parsers: dict[str, Callable[[Any], None]] = self.client._connection.parsers

        def message_create(data: Any) -> None:
            # Called synchronously in gateway order: the queue keeps that order.
            if isinstance(data, dict):
                self._queue.put_nowait(data)

        # The raw dict is all the intake reads. discord.py's own parsers would build a
        # Message (and a Member) for every message and edit, the bot's own progress and
        # answers included, only to dispatch on_message / on_message_edit, which nothing
        # here listens to (and with max_messages=None nothing caches them).
        parsers["MESSAGE_CREATE"] = message_create
        parsers["MESSAGE_UPDATE"] = lambda data: None

    async def _intake(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty() and len(batch) < 100:
                batch.append(self._queue.get_nowait())
            delay = 0.2
            while True:
                try:
                    await self.ingest(batch)
                    break
                except Exception:
                    # Not recorded, so not acknowledged: retried (and catch-up re-reads it).
                    log.warning("discord.record_failed", exc_info=True)
                    await asyncio.sleep(delay)
                    delay = min(10.0, delay * 2)

    async def _parent_of(self, channel_id: str) -> str:
        """The parent channel of a thread ("" when ``channel_id`` is not a thread)."""
        if channel_id in self._parents:
            return self._parents[channel_id]
        assert self.client is not None
        parent = ""
        cached = self.client.get_channel(int(channel_id))
        if isinstance(cached, discord.Thread):
            parent = str(cached.parent_id)
        elif cached is None:
            try:
                raw: dict[str, Any] = dict(await self.client.http.get_channel(int(channel_id)))
                if raw.get("type") in _THREAD_TYPES and raw.get("parent_id"):
                    parent = str(raw["parent_id"])
            except discord.HTTPException:
                log.debug("discord.channel_lookup_failed", channel=channel_id)
        self._parents[channel_id] = parent
        return parent

    async def _bound(self, channel: str) -> bool:
        assert self.layer is not None
        return await self.intake.binding_for("discord", self.bot_id, channel) is not None

    async def ingest(self, payloads: list[dict[str, Any]]) -> None:
        """Convert and record payloads; each channel's events with its cursor, atomically."""
        assert self.layer is not None
        groups: dict[str, list[dict[str, Any]]] = {}
        for data in payloads:
            cid = snowflake(data.get("channel_id"))
            if cid is not None and snowflake(data.get("id")) is not None:
                groups.setdefault(cid, []).append(data)
        for cid, items in groups.items():
            if all(_author(d) == self.bot_id for d in items):
                # Only our own messages came back (the progress message, an answer's
                # chunks): nothing to record, and no cursor write for them (a write
                # transaction per reply); a catch-up reads them again and drops them.
                continue
            parent = await self._parent_of(cid)
            if not await self._bound(parent or cid):
                log.debug("discord.unbound", channel=cid)
                continue
            events: list[tuple[InboundEvent, str]] = []
            for data in sorted(items, key=lambda d: int(d["id"])):
                event = await self._convert(data, parent or None)
                if event is not None:
                    events.append((event, "received"))
            top = max(int(d["id"]) for d in items)
            known = await self._known_cursor(cid)
            cursor = None
            if top > known:
                cursor = (self.cursor_name(cid), str(top))
            if events or cursor is not None:
                # Recorded with the channel's cursor in one transaction.
                await self.submit(events, cursor=cursor)
            self._cursors[cid] = max(known, top)

    async def _convert(self, data: dict[str, Any], parent: str | None) -> InboundEvent | None:
        assert self.layer is not None
        try:
            draft = convert_message(data, bot_id=self.bot_id, parent_id=parent)
        except Exception:  # a converter bug must not stop the intake
            log.warning("discord.convert_failed", exc_info=True)
            return None
        if draft is None:
            return None
        ev = draft.event
        if ev.sender == self.bot_id:
            return None  # our own messages come back on the gateway
        if draft.needs_root and ev.reply_to is not None:
            root = await self.intake.thread_of("discord", self.bot_id, ev.channel,
                                                    ev.reply_to)
            if root is not None:  # a reply chain the bot answered in place
                ev = ev.with_thread(root)
                extra = {**ev.extra, "start_thread": False}
                ev = InboundEvent.from_json({**ev.to_json(), "extra": extra})
        return ev

    async def fetch_thread_history(self, event: InboundEvent) -> list[InboundEvent]:
        """Earlier messages of a thread the bot is first mentioned in, the ones the store
        has not recorded (recorded ones reach the prompt through the layer already)."""
        if self.client is None:
            return []
        found = await fetch_thread_history(self.client.http, event, bot_id=self.bot_id,
                                           max_messages=self.opts.thread_history_max)
        if not found:
            return []
        known = await self.intake.known_keys([f.dedupe_key for f in found])
        return [f for f in found if f.dedupe_key not in known]

    async def download(self, attachment: Attachment, dest: Path, *, max_bytes: int) -> int:
        """An attachment from its (signed) CDN URL, as the gateway gave it."""
        if not attachment.ref.startswith(("https://", "http://")):
            raise AttachmentRefused("it has no download address")
        # only Discord's CDN or the configured API's host: never any address a message names
        allowed = (*DISCORD_CDN_HOSTS, self.opts.api_base)
        return await stream_to_file(check_url(attachment.ref, allowed), dest,
                                    max_bytes=max_bytes, allowed=allowed)

    async def _known_cursor(self, channel_id: str) -> int:
        if channel_id not in self._cursors:
            assert self.layer is not None
            saved = await self.intake.cursors.get(self.cursor_name(channel_id))
            self._cursors[channel_id] = int(saved) if saved and saved.isdigit() else 0
        return self._cursors[channel_id]

    # -- catch-up ----------------------------------------------------------------------------------

    def on_gateway_ready(self, kind: str) -> None:
        log.info("discord.gateway_up", how=kind, bot=self.bot_id)
        self._gateway_up = True
        self._spawn(self.catch_up(), name=f"discord-catch-up-{kind}")

    async def catch_up(self) -> None:
        """Record what bound channels and their active threads got after their cursors."""
        if self.client is None or self.layer is None:
            return
        async with self._catch_up_lock:
            try:
                await self._catch_up()
            except Exception:
                log.warning("discord.catch_up_failed", exc_info=True)
            self.catch_ups += 1

    async def _watermark(self) -> int:
        """The newest cursor of any channel: the lower bound for channels without one."""
        assert self.layer is not None
        return await self.intake.cursors.watermark(f"discord:{self.bot_id}:ch:")

    async def _catch_up(self) -> None:
        assert self.client is not None and self.layer is not None
        await self.intake.refresh_bindings()
        bound = {b.channel for b in self.intake.bound_channels("discord")}
        watermark = await self._watermark()
        guilds: set[int] = set()
        for cid in sorted(bound):
            if snowflake(cid) is None:
                continue
            try:
                raw: dict[str, Any] = dict(await self.client.http.get_channel(int(cid)))
            except discord.HTTPException as exc:
                log.warning("discord.bound_channel_unavailable", channel=cid, error=str(exc))
                continue
            if snowflake(raw.get("guild_id")):
                guilds.add(int(raw["guild_id"]))
            await self._history(cid, watermark)
        for gid in sorted(guilds):
            try:
                active = await self.client.http.get_active_threads(gid)
            except discord.HTTPException as exc:
                log.warning("discord.active_threads_failed", guild=gid, error=str(exc))
                continue
            for t in active.get("threads", []):
                tid, parent = snowflake(t.get("id")), snowflake(t.get("parent_id"))
                if tid is None or parent not in bound:
                    continue
                self._parents[tid] = parent
                await self._history(tid, watermark)

    async def _history(self, channel_id: str, watermark: int) -> None:
        assert self.client is not None
        start = await self._known_cursor(channel_id) or watermark
        if not start:
            return  # first start ever: nothing was missed
        overlap = int(self.opts.catch_up_overlap_s * 1000) << 22
        after = max(0, start - overlap)
        for _ in range(self.opts.catch_up_max_pages):
            try:
                page = await self.client.http.logs_from(int(channel_id), 100, after=after)
            except discord.HTTPException as exc:
                log.warning("discord.history_failed", channel=channel_id, error=str(exc))
                return
            items: list[dict[str, Any]] = [dict(m) for m in page
                                           if isinstance(m, dict) and snowflake(m.get("id"))]
            if not items:
                return
            await self.ingest(items)
            after = max(int(m["id"]) for m in items)
            if len(page) < 100:
                return

    # -- slash commands ----------------------------------------------------------------------------

    async def on_interaction(self, interaction: discord.Interaction[Any]) -> None:
        """A slash command: recorded like a message (``/name``), then acknowledged. A click
        on a button goes to :meth:`on_click`."""
        if interaction.type is discord.InteractionType.component:
            await self.on_click(interaction)
            return
        if interaction.type is not discord.InteractionType.application_command:
            return
        data: dict[str, Any] = dict(interaction.data or {})
        name = str(data.get("name", "")).lower()
        if name not in COMMANDS or interaction.channel_id is None:
            return
        cid = str(interaction.channel_id)
        parent = await self._parent_of(cid)
        if not await self._bound(parent or cid):
            await interaction.response.send_message(
                "This channel is not bound to GEODE.", ephemeral=True)
            return
        iid = str(interaction.id)
        extra: dict[str, Any] = {
            "guild": str(interaction.guild_id or ""),
            "interaction": {"token": interaction.token, "expires": time.time() + 14 * 60},
        }
        if parent:
            extra["thread_id"] = cid
        user = interaction.user
        event = InboundEvent(
            platform="discord", workspace=self.bot_id, channel=parent or cid, thread_root=cid,
            message_id=iid, sender=str(user.id), sender_name=user.display_name,
            dedupe_key=f"discord:{self.bot_id}:interaction:{iid}", text=f"/{name}",
            mentions_bot=True, date=snowflake_seconds(iid), extra=extra,
        )
        try:
            await self.submit([(event, "received")])
        except Exception:
            log.exception("discord.interaction_record_failed")
            await interaction.response.send_message("⚠️ Not recorded; please try again.",
                                                    ephemeral=True)
            return
        # Acknowledged only after the record (Discord allows 3 s); the answer follows.
        with contextlib.suppress(discord.HTTPException):
            await interaction.response.defer(thinking=True)

    # -- approval buttons --------------------------------------------------------------------------

    async def send_approval(self, target: ReplyTarget, chunk: Chunk, *, short_id: str) -> str:
        """The request with an action row of two buttons, Approve and Deny (custom ids
        ``geode:approve:<short id>`` / ``geode:deny:<short id>``). A click comes back as a
        gateway INTERACTION_CREATE (:meth:`on_click`), whichever process receives it: the
        buttons are plain message components, not a discord.py View living in memory."""
        assert self.client is not None
        try:
            cid, ref = await self._route(target, create=True)
            payload: dict[str, Any] = {
                "content": chunk.formatted, "allowed_mentions": _NO_MENTIONS.to_dict(),
                "components": approval_components(short_id),
            }
            if ref is not None:
                payload["message_reference"] = {"message_id": ref, "channel_id": cid,
                                                "fail_if_not_exists": False}
            route = discord.http.Route("POST", "/channels/{channel_id}/messages",
                                       channel_id=int(cid))
            data = await self._rest(self.client.http.request(route, json=payload))
        except (discord.DiscordException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _map_error(exc, sending=True) from exc
        mid = snowflake(data.get("id")) if isinstance(data, dict) else None
        if mid is None:
            raise DeliveryError("unknown", "Discord answered the request without a message id")
        self._where_sent[mid] = cid
        return mid

    async def on_click(self, interaction: discord.Interaction[Any]) -> None:
        """A click on an approval button (MESSAGE_COMPONENT): recorded as the ``/approve ID``
        / ``/deny ID`` command of the user who clicked, in the request message's thread, then
        acknowledged as a deferred update (Discord allows 3 s; nothing changes yet). The
        command decides (the store's conditional update: a double click decides once), the
        request message is edited to show the outcome without its buttons, and the clicker
        gets the command's answer as an ephemeral follow-up (:meth:`answer_action`), e.g.
        "Only X, Y may approve". Its dedupe key is the interaction's id: an interaction
        delivered twice is recorded once."""
        action = parse_action(interaction.data)
        message, user = interaction.message, interaction.user
        if (action is None or message is None or interaction.channel_id is None
                or not isinstance(user, discord.User | discord.Member)):
            log.info("discord.click_not_ours", interaction=interaction.id)
            with contextlib.suppress(discord.HTTPException):
                await interaction.response.send_message(
                    "⚠️ This button is not one GEODE understands.", ephemeral=True)
            return
        verb, short_id = action
        cid, mid = str(interaction.channel_id), str(message.id)
        parent = await self._parent_of(cid)
        if not await self._bound(parent or cid):
            with contextlib.suppress(discord.HTTPException):
                await interaction.response.send_message(
                    "This channel is not bound to GEODE.", ephemeral=True)
            return
        iid = str(interaction.id)
        extra: dict[str, Any] = {
            "guild": str(interaction.guild_id or ""), "action": "button",
            # the command's answer goes to the clicker alone (the layer posts no notice)
            "answer": "private",
            "component": {"token": interaction.token, "expires": time.time() + 14 * 60},
        }
        if parent:  # the request was posted in a Discord thread: the turn's thread
            extra["thread_id"] = cid
            root = cid
        else:  # answered in place: the reply chain the request message is filed under
            root = await self.intake.thread_of("discord", self.bot_id, cid, mid) or mid
        event = InboundEvent(
            platform="discord", workspace=self.bot_id, channel=parent or cid,
            thread_root=root, message_id=mid, sender=str(user.id),
            sender_name=user.display_name, sender_is_bot=bool(user.bot),
            dedupe_key=f"discord:{self.bot_id}:interaction:{iid}",
            text=f"/{verb} {short_id}", mentions_bot=True, reply_to=mid, reply_to_bot=True,
            date=snowflake_seconds(iid), extra=extra,
        )
        try:
            await self.submit([(event, "received")])
        except Exception:
            log.exception("discord.click_record_failed")
            with contextlib.suppress(discord.HTTPException):
                await interaction.response.send_message(
                    "⚠️ Not recorded; please click again.", ephemeral=True)
            return
        # Acknowledged only after the record; a redelivered interaction was acknowledged
        # before (40060), which changes nothing.
        with contextlib.suppress(discord.HTTPException):
            await interaction.response.defer()

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        """The answer to a click, as an ephemeral follow-up of its interaction (flags 64:
        only the clicker sees it). Raises :class:`DeliveryError` when that is not possible
        any more (the token lives 15 minutes): the layer then answers in the thread."""
        comp = event.extra.get("component")
        if not isinstance(comp, dict):
            return
        assert self.client is not None
        token = comp.get("token")
        if not isinstance(token, str) or float(comp.get("expires", 0)) <= time.time():
            raise DeliveryError("fatal", "the click's interaction has expired")
        hook = discord.Webhook.from_state(
            data={"id": int(self.app_id), "type": 3, "token": token},
            state=self.client._connection)
        try:
            await self._rest(hook.send(self.render(text)[0].formatted, ephemeral=True,
                                       allowed_mentions=_NO_MENTIONS))
        except (discord.DiscordException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _map_error(exc, sending=True) from exc

    # -- sending -----------------------------------------------------------------------------------

    async def _ensure_thread(self, parent: str, root: str, title: str) -> bool:
        """Open the thread on ``root`` (idempotent); False when threads are refused here."""
        if root in self._threads:
            return True
        assert self.client is not None
        try:
            await self._rest(self.client.http.start_thread_with_message(
                int(parent), int(root), name=title[:100] or "GEODE",
                auto_archive_duration=self.opts.thread_auto_archive_minutes,
            ))
        except discord.HTTPException as exc:
            if exc.code == 160004:  # exists already (created before a restart)
                pass
            elif exc.status == 403 or exc.code in (50013, 50024, 50001):
                log.info("discord.thread_refused_reply_inline", channel=parent,
                         code=exc.code)
                self._inline.add(root)
                return False
            else:
                raise
        self._threads.add(root)
        self._parents[root] = parent
        return True

    async def _route(self, target: ReplyTarget, *, create: bool) -> tuple[str, str | None]:
        """(channel to post in, message to reference) for a target."""
        ex = target.extra
        thread = ex.get("thread_id")
        ref = target.reply_to if target.reply_to and "interaction" not in ex else None
        if isinstance(thread, str) and thread:
            return thread, (ref if ref != thread else None)
        root = target.thread_root
        if (ex.get("start_thread") and self.opts.reply_mode == "thread"
                and root not in self._inline):
            if root in self._threads:
                return root, None
            if create and await self._ensure_thread(target.channel, root,
                                                    str(ex.get("title") or "")):
                return root, None
        return target.channel, ref

    async def send(self, target: ReplyTarget, chunk: Chunk, *, plain: bool = False) -> str:
        assert self.client is not None
        text = chunk.fallback if plain else chunk.formatted
        interaction = target.extra.get("interaction")
        if isinstance(interaction, dict) and float(interaction.get("expires", 0)) > time.time():
            sent = await self._followup(str(interaction.get("token", "")), text)
            if sent is not None:
                return sent
        try:
            cid, ref = await self._route(target, create=True)
            channel = self.client.get_partial_messageable(int(cid))
            reference = (discord.MessageReference(message_id=int(ref), channel_id=int(cid),
                                                  fail_if_not_exists=False)
                         if ref is not None else None)
            if reference is not None:
                msg = await self._rest(channel.send(text, reference=reference,
                                                    allowed_mentions=_NO_MENTIONS))
            else:
                msg = await self._rest(channel.send(text, allowed_mentions=_NO_MENTIONS))
        except (discord.DiscordException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _map_error(exc, sending=True) from exc
        self._where_sent[str(msg.id)] = cid
        return str(msg.id)

    async def _followup(self, token: str, text: str) -> str | None:
        assert self.client is not None
        try:
            hook = discord.Webhook.partial(int(self.app_id), token, client=self.client)
            msg = await self._rest(hook.send(text, wait=True, allowed_mentions=_NO_MENTIONS))
        except (discord.DiscordException, aiohttp.ClientError, ValueError) as exc:
            log.info("discord.followup_failed_send_instead", error=str(exc))
            return None
        self._where_sent[str(msg.id)] = str(msg.channel.id)
        return str(msg.id)

    async def edit(
        self, target: ReplyTarget, message_id: str, chunk: Chunk, *, plain: bool = False
    ) -> None:
        assert self.client is not None
        text = chunk.fallback if plain else chunk.formatted
        known = self._where_sent.get(message_id)
        if known is not None:
            candidates = [known]
        else:  # after a restart: where the route says, then the other possible place
            routed, _ = await self._route(target, create=False)
            candidates = list(dict.fromkeys([routed, target.thread_root, target.channel]))
        last: DeliveryError | None = None
        for cid in candidates:
            msg = self.client.get_partial_messageable(int(cid)).get_partial_message(
                int(message_id))
            try:
                # view=None: no components. GEODE's only ones are an approval request's
                # buttons, and the edit of a request shows its outcome (no more clicks).
                await self._rest(msg.edit(content=text, allowed_mentions=_NO_MENTIONS,
                                          view=None))
                self._where_sent[message_id] = cid
                return
            except (discord.DiscordException, aiohttp.ClientError, TimeoutError,
                    OSError) as exc:
                last = _map_error(exc, sending=False)
                if last.kind != "not_found":
                    raise last from exc
        assert last is not None
        raise last

    def upload_limit(self, *, image: bool) -> int:
        return int(self.opts.max_upload_mb * (1 << 20))

    async def post_file(
        self, target: ReplyTarget, *, filename: str, data: bytes, caption: str | None,
        image: bool,
    ) -> str:
        """A message with the file as its attachment (multipart ``POST
        /channels/{id}/messages``), in the thread the replies go to."""
        assert self.client is not None
        text = (caption or "")[:DISCORD_LIMIT] or None
        try:
            cid, _ = await self._route(target, create=True)
            channel = self.client.get_partial_messageable(int(cid))
            msg = await self._rest(channel.send(
                text, file=discord.File(io.BytesIO(data), filename=filename),
                allowed_mentions=_NO_MENTIONS))
        except (discord.DiscordException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _map_error(exc, sending=True) from exc
        self._where_sent[str(msg.id)] = cid
        return str(msg.id)

    async def find_upload(
        self, target: ReplyTarget, *, filename: str, size: int, since: datetime
    ) -> str | None:
        """A message of the bot posted since ``since`` with an attachment of that name and
        size (:meth:`_posted_since`); its id."""
        wanted = _attachment_name(filename)
        for m in await self._posted_since(target, since):
            for a in m.get("attachments") or []:
                if (isinstance(a, dict) and a.get("size") == size
                        and _attachment_name(str(a.get("filename", ""))) == wanted):
                    return str(m["id"])
        return None

    async def find_progress(self, target: ReplyTarget, *, since: datetime) -> list[str]:
        """The bot's progress placeholders (``⏳ …``) of this turn posted since ``since``
        (:meth:`_posted_since`), oldest first: a kill hid one before its id was recorded
        (``bots.progress.ProgressFinder``). In the channel itself only those replying to
        the turn's message count (another thread's turn posts there too)."""
        found = {int(m["id"]) for m in await self._posted_since(target, since)
                 if str(m.get("id", "")).isdigit()
                 and str(m.get("content") or "").startswith("⏳") and _of_turn(m, target)}
        return [str(i) for i in sorted(found)]

    async def find_approval(
        self, target: ReplyTarget, *, short_id: str, since: datetime
    ) -> str | None:
        """A message of the bot posted since ``since`` (:meth:`_posted_since`) with the
        buttons of the request ``short_id`` (:func:`approval_components`); its id."""
        ours = {b["custom_id"] for row in approval_components(short_id)
                for b in row["components"]}
        for m in await self._posted_since(target, since):
            for row in m.get("components") or []:
                for b in (row.get("components") or []) if isinstance(row, dict) else []:
                    if isinstance(b, dict) and b.get("custom_id") in ours:
                        return str(m["id"])
        return None

    async def _posted_since(
        self, target: ReplyTarget, since: datetime
    ) -> list[dict[str, Any]]:
        """The bot's messages posted since ``since`` (a minute earlier: clocks differ) where
        the thread's replies go (after a restart: where the route says, then the thread,
        then the channel), read back to reconcile a post whose outcome a crash hid.

        Raises:
            DeliveryError: ``unknown``: they could not be read.
        """
        assert self.client is not None
        after = max(0, int((since.timestamp() - 60.0) * 1000) - DISCORD_EPOCH_MS) << 22
        found: list[dict[str, Any]] = []
        try:
            routed, _ = await self._route(target, create=False)
            for cid in dict.fromkeys([routed, target.thread_root, target.channel]):
                if snowflake(cid) is None:
                    continue
                try:
                    page: list[Any] = await self._rest(
                        self.client.http.logs_from(int(cid), 100, after=after))
                except discord.NotFound:
                    continue  # no such thread (the reply went inline)
                for m in page:
                    if (isinstance(m, dict)
                            and str((m.get("author") or {}).get("id")) == self.bot_id):
                        found.append(m)
        except (discord.DiscordException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise DeliveryError("unknown", f"cannot read the thread back: {exc}") from exc
        return found

    async def react(self, target: ReplyTarget, message_id: str, emoji: str | None) -> None:
        assert self.client is not None
        thread = target.extra.get("thread_id")
        cid = thread if isinstance(thread, str) and thread else target.channel
        msg = self.client.get_partial_messageable(int(cid)).get_partial_message(int(message_id))
        try:
            if emoji:
                await self._rest(msg.add_reaction(emoji))
            elif self.client.user is not None:
                for e in (self.opts.ack_emoji,):
                    if e:
                        await self._rest(msg.remove_reaction(e, self.client.user))
        except (discord.DiscordException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _map_error(exc, sending=False) from exc

    async def typing(self, target: ReplyTarget) -> None:
        assert self.client is not None
        try:
            cid, _ = await self._route(target, create=False)
            await self._rest(self.client.http.send_typing(int(cid)))
        except (discord.DiscordException, aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise _map_error(exc, sending=False) from exc


DISCORD_EPOCH_MS = 1_420_070_400_000


def _attachment_name(name: str) -> str:
    """A file name as Discord stores it on an attachment (it replaces what it does not keep
    in names, spaces included, with underscores)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _map_error(exc: BaseException, *, sending: bool) -> DeliveryError:
    """The one place discord.py / network errors become DeliveryError kinds."""
    text = str(exc)
    if isinstance(exc, discord.RateLimited):
        return DeliveryError("retry", text, retry_after=exc.retry_after)
    if isinstance(exc, discord.NotFound):
        return DeliveryError("fatal" if sending else "not_found", text)
    if isinstance(exc, discord.Forbidden):
        return DeliveryError("fatal", text)
    if isinstance(exc, discord.DiscordServerError):
        # The request reached Discord: for a send the outcome is unknown.
        return DeliveryError("unknown" if sending else "retry", text)
    if isinstance(exc, discord.HTTPException):
        if exc.status == 429:
            return DeliveryError("retry", text)
        return DeliveryError("fatal", text)
    if isinstance(exc, aiohttp.ClientError | TimeoutError | OSError):
        return DeliveryError("unknown" if sending else "retry", text)
    return DeliveryError("fatal", text)


def _author(data: dict[str, Any]) -> str | None:
    """The id of a MESSAGE_CREATE payload's author."""
    author = data.get("author")
    return snowflake(author.get("id")) if isinstance(author, dict) else None


def _of_turn(message: dict[str, Any], target: ReplyTarget) -> bool:
    """A bot message posted for ``target``'s turn: in a thread (its own), or in the channel
    as a reply to the turn's message."""
    if str(message.get("channel_id")) != target.channel:
        return True
    ref = message.get("message_reference")
    return (target.reply_to is not None and isinstance(ref, dict)
            and str(ref.get("message_id")) == target.reply_to)
