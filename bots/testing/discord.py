"""A wire-level fake Discord: REST API v10 and the gateway websocket, on 127.0.0.1.

What is simulated (enough for a bot written with discord.py to run unchanged):

* REST (``/api/v{N}/...``; the routes a bot uses are listed in ``_add_rest_routes``):
  users/@me, application info, gateway/bot, channels, message history (``after`` / ``before`` /
  ``around`` / ``limit``, newest first like Discord), send/edit/delete, reactions, typing, threads
  (from a message: the thread takes the message's id, as on Discord), active threads, application
  commands, interaction callbacks (incl. DEFERRED_UPDATE_MESSAGE and UPDATE_MESSAGE for a
  click) and webhook follow-ups. Message components (buttons) are stored with a bot's message
  and replaced by an edit that sends ``components``. Responses carry exactly
  ``Content-Type: application/json`` (discord.py compares it verbatim). Discord's errors that matter
  to a connector are reproduced: content over 2,000 characters (50035), empty message (50006),
  unknown channel/message (10003/10008), editing another user's message (50005), a second thread on
  a message (160004), threads where the channel denies them (50013), an interaction acknowledged
  twice (40060), a bad token (401).
* Rate limits: :meth:`FakeDiscord.fail_next` answers matching requests with Discord's 429 body
  and headers (``Retry-After``, ``X-RateLimit-*`` and ``Via``, without which discord.py takes a 429
  for a Cloudflare ban and gives up), or with any other status. Budgets, off unless asked:
  ``channel_limit`` messages sent, edited or deleted per channel per ``channel_period_s`` (a
  window, as Discord's per-channel bucket: every answer on those routes carries the bucket's
  ``X-RateLimit-*`` headers, which discord.py paces by), and ``global_per_s`` requests per second
  for the whole bot (Discord's global limit, 50); past either a request answers 429 (the global
  one with ``X-RateLimit-Global``), counted in :attr:`FakeDiscord.limited`.
* Gateway (``/gateway``; ``/resume-gateway`` is the ``resume_gateway_url``): HELLO, IDENTIFY ->
  READY + one GUILD_CREATE per guild (channels, active threads, members), heartbeat -> ACK, RESUME
  -> replay of every dispatch after the client's ``seq`` then RESUMED, INVALID_SESSION, RECONNECT,
  ``zlib-stream`` transport compression when asked for (other values: plain text frames, which
  discord.py also accepts). Every dispatch has a sequence number; a session keeps its dispatches
  while its connection is down so that a RESUME replays them. A client closing with 1000/1001 ends
  its session, as on Discord. MESSAGE_CREATE/UPDATE/DELETE and reactions are also dispatched for the
  bot's own REST actions (a bot must ignore itself); without the MESSAGE_CONTENT intent, content is
  blanked unless the bot is mentioned or wrote the message.

How to script it::

    async with FakeDiscord() as srv, srv.patch_discord():
        client = discord.Client(intents=intents)
        task = asyncio.create_task(client.start(srv.token))
        mid = await srv.user_says(srv.channel_id, "hi", mention_bot=True)
        await srv.wait_for(lambda: len(srv.sent) == 1)
        assert srv.sent[0].reference == mid

A default guild (``srv.guild_id``) with a text channel (``srv.channel_id``) and a human member
(``srv.user_id``) exist; add more with :meth:`add_guild`, :meth:`add_text_channel`,
:meth:`add_user`; users post with :meth:`user_says`, open threads with :meth:`create_thread` and run
slash commands with :meth:`slash_command`, click a message's button with :meth:`user_clicks`
(:meth:`redeliver_interaction` dispatches an interaction again; :meth:`buttons` shows a
message's buttons now).
Connection faults: :meth:`drop_connection`, :meth:`invalidate_session`, :meth:`request_reconnect`,
:meth:`expire_sessions`,
:meth:`hold_gateway` / :meth:`release_gateway` (hold new gateway handshakes, so that events can be
queued for a RESUME deterministically), ``srv.ack_heartbeats = False`` (zombie connection).
Records: ``sent``, ``edits``, ``deleted``, ``reactions``, ``typing``, ``threads_created``,
``command_syncs``, ``interaction_responses``, ``requests``, ``connections``, ``identifies``,
``resumes``, ``heartbeats``, ``uploads`` (files the bot attached, with their bytes, served back
on the fake CDN; a message's files over ``max_upload_bytes`` are 413 / 40005;
:meth:`hold_upload_answers` lets a message with files take effect while its answer waits);
:meth:`messages_in` gives a channel's final state.

How to point discord.py at it: discord.py 2.x builds REST URLs from the class attribute
``discord.http.Route.BASE`` and, for a plain ``discord.Client``, connects to the class attribute
``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY`` (``GET /gateway/bot`` is only used by
``AutoShardedClient``); it appends ``?v=10&encoding=json&compress=zlib-stream``.
:meth:`FakeDiscord.patch_discord` sets both to :attr:`api_base` / :attr:`gateway_url` and restores
them (process-wide: one patched fake at a time).

discord.py habits worth knowing in tests: it sleeps 5 s before every non-initial IDENTIFY
(override ``Client.before_identify_hook`` to skip it); it waits ``guild_ready_timeout`` (2 s) after
the last GUILD_CREATE before ``on_ready`` (pass a small value); ``Client.close()`` reaches the wire
as close code 4000, so the session stays resumable here as on Discord.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import json
import math
import re
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog
from aiohttp import WSMsgType, web

from bots.testing._fakebase import Fault, Routes, route
from bots.testing._uploads import UploadHold

__all__ = ["FakeDiscord", "InteractionResponse", "SentMessage", "UploadedFile"]

log = structlog.get_logger(__name__)

JSON = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
F = TypeVar("F", bound=Callable[..., Any])

#: the REST API's prefix, and the paths the route table names under it
_API = r"/api/v{version:\d+}"
_CH = "/channels/{cid}"
_MSG = _CH + "/messages/{mid}"
_CMDS = "/applications/{app}/guilds/{gid}/commands"


def _rest(verb: str, path: str) -> Callable[[F], F]:
    """A REST route of the table: named ``"VERB /path"``, served under :data:`_API`."""
    return route(f"{verb} {path}", verb=verb, path=_API + path)

DISCORD_EPOCH_MS = 1420070400000
MAX_CONTENT = 2000
# Intent bits (Discord gateway docs).
GUILD_MESSAGES = 1 << 9
GUILD_MESSAGE_REACTIONS = 1 << 10
MESSAGE_CONTENT = 1 << 15
# Permission bits granted to @everyone in fake guilds: view, send, history, reactions, embeds,
# files, app commands, public/private threads, send in threads.
_PERMS = (1 << 10) | (1 << 11) | (1 << 16) | (1 << 6) | (1 << 14) | (1 << 15) | (1 << 31)
_THREAD_PERMS = (1 << 35) | (1 << 36) | (1 << 38)
_OP_DISPATCH, _OP_HEARTBEAT, _OP_IDENTIFY, _OP_RESUME = 0, 1, 2, 6
_OP_RECONNECT, _OP_INVALID_SESSION, _OP_HELLO, _OP_ACK = 7, 9, 10, 11


@dataclass(frozen=True, kw_only=True)
class SentMessage:
    """A message the bot created through REST (channel send, reply, interaction follow-up)."""

    channel_id: int
    message_id: int
    content: str
    reference: int | None = None
    attachments: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class UploadedFile:
    """A file the bot attached to a message it created (multipart ``files[n]``)."""

    channel_id: int
    message_id: int
    filename: str
    data: bytes
    content_type: str | None
    content: str  # the message's text (the caption)


@dataclass(frozen=True)
class _Part:
    filename: str
    data: bytes
    content_type: str | None


@dataclass(frozen=True, kw_only=True)
class InteractionResponse:
    """One answer to an interaction (callback, follow-up or edit of the original response)."""

    interaction_id: int
    kind: str  # "callback" | "followup" | "edit_original"
    type: int | None
    content: str | None
    ephemeral: bool


class _ApiError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(kw_only=True, eq=False)
class _Connection:
    ws: web.WebSocketResponse
    compressor: Any  # zlib.compressobj() or None; shared stream state => sends are serialised
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed_by_server: bool = False

    async def send(self, payload: JSON) -> None:
        """Send one frame; on a socket already closing the frame is lost, as on a real network
        (dispatches stay in the session log for a RESUME)."""
        text = json.dumps(payload)
        async with self.lock:
            with contextlib.suppress(ConnectionError, RuntimeError):
                if self.compressor is None:
                    await self.ws.send_str(text)
                else:
                    data = self.compressor.compress(text.encode())
                    await self.ws.send_bytes(data + self.compressor.flush(zlib.Z_SYNC_FLUSH))


@dataclass(kw_only=True)
class _Session:
    session_id: str
    intents: int
    seq: int = 0
    # Every dispatch of the session, kept so that RESUME can replay what the client missed.
    log: list[JSON] = field(default_factory=list)
    conn: _Connection | None = None
    alive: bool = True
    # Held while a sequence number is assigned and its frame sent, and during a RESUME replay:
    # frames reach the client in `seq` order.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _iso(snowflake: int) -> str:
    ms = (snowflake >> 22) + DISCORD_EPOCH_MS
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat()


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # Exact header: discord.py only decodes JSON when Content-Type == "application/json".
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    return web.Response(body=json.dumps(data).encode(), status=status, headers=hdrs)


def _no_content() -> web.Response:
    return web.Response(status=204)


def _check_components(rows: Any) -> list[JSON]:
    """Discord's checks on message components that a bot can get wrong: action rows (type 1)
    of at most 5 buttons (type 2), each with a style 1-5, a label of at most 80 characters and
    a ``custom_id`` of 1-100 characters (a link button, style 5, has a ``url`` instead)."""
    bad = _ApiError(400, 50035, "Invalid Form Body: components")
    if not isinstance(rows, list) or len(rows) > 5:
        raise bad
    for row in rows:
        if not isinstance(row, dict) or row.get("type") != 1:
            raise bad
        items = row.get("components")
        if not isinstance(items, list) or not 1 <= len(items) <= 5:
            raise bad
        for b in items:
            if not isinstance(b, dict) or b.get("type") != 2 or b.get("style") not in range(1, 6):
                raise bad
            if len(str(b.get("label") or "")) > 80:
                raise bad
            key = "url" if b["style"] == 5 else "custom_id"
            if not isinstance(b.get(key), str) or not 1 <= len(b[key]) <= 100:
                raise bad
    return rows


#: the routes of a channel's message bucket: send (POST), edit (PATCH), delete (DELETE)
_MESSAGE_ROUTE = re.compile(r"/channels/(\d+)/messages(?:/\d+)?")


class FakeDiscord(Routes, UploadHold):
    """Fake Discord REST API and gateway; see the module docstring."""

    def __init__(
        self,
        *,
        token: str = "fake-bot-token",
        bot_name: str = "geode",
        heartbeat_interval_ms: int = 1000,
        api_version: int = 10,
        channel_limit: int = 0,
        channel_period_s: float = 5.0,
        global_per_s: float = 0.0,
    ) -> None:
        super().__init__()
        self.channel_limit = channel_limit
        self.channel_period_s = channel_period_s
        self.global_per_s = global_per_s
        #: channel -> (end of its bucket's window, monotonic; requests in it)
        self._windows: dict[int, tuple[float, int]] = {}
        #: (start of the current second, requests in it) of the global limit
        self._global_window = (0.0, 0)
        #: 429s the budgets answered (not counting fail_next's)
        self.limited = 0
        self.token = token
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.api_version = api_version
        self.ack_heartbeats = True
        #: the largest total of attachments one message may carry (Discord's 10 MiB default)
        self.max_upload_bytes = 10 << 20
        self._ids = itertools.count(1)
        self._last_id = 0
        self.bot_id = self._snowflake()
        self.bot_user: JSON = self._user_payload(self.bot_id, bot_name, bot=True)
        self.users: dict[int, JSON] = {self.bot_id: self.bot_user}
        self.guilds: dict[int, JSON] = {}
        self.channels: dict[int, JSON] = {}
        self._messages: dict[int, dict[int, JSON]] = {}
        self._thread_members: dict[int, set[int]] = {}
        self._commands: dict[int | None, list[JSON]] = {}
        self._interactions: dict[str, JSON] = {}
        self._sessions: dict[str, _Session] = {}
        self._changed = asyncio.Condition()
        self._gateway_open = asyncio.Event()
        self._gateway_open.set()
        self._runner: web.AppRunner | None = None
        self._stopping = False
        self._conns: set[_Connection] = set()
        self.port = 0
        # Records for assertions.
        self.sent: list[SentMessage] = []
        self.edits: list[tuple[int, int, str | None]] = []
        self.deleted: list[tuple[int, int]] = []
        self.reactions: list[tuple[int, int, str]] = []
        self.typing: list[int] = []
        self.threads_created: list[JSON] = []
        self.command_syncs: list[tuple[int | None, list[str]]] = []
        self.interaction_responses: list[InteractionResponse] = []
        self.requests: list[tuple[str, str]] = []
        #: attachment files served on the fake CDN (``/attachments/ID/NAME``), and the
        #: (id, name) of each download
        self._cdn: dict[str, bytes] = {}
        self.downloads: list[str] = []
        #: files the bot attached to its messages (bytes included), in order
        self.uploads: list[UploadedFile] = []
        self.connections: list[JSON] = []
        self.identifies = 0
        self.resumes = 0
        self.heartbeats = 0
        self.guild_id = self.add_guild("geode-test")
        self.channel_id = self.add_text_channel(self.guild_id, "general")
        self.user_id = self.add_user("alice")

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> FakeDiscord:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Listen on 127.0.0.1 on a free port."""
        # bodies up to the upload limit and some (aiohttp's default is 1 MiB)
        app = web.Application(middlewares=[self._middleware], client_max_size=64 << 20)
        self.mount(app)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        log.debug("fake_discord.started", port=self.port)

    async def stop(self) -> None:
        """Close every gateway connection (1001, like a Discord restart) and the server."""
        self._stopping = True
        self._gateway_open.set()
        for conn in list(self._conns):
            conn.closed_by_server = True
            await conn.ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def api_base(self) -> str:
        """REST base URL, the value for ``discord.http.Route.BASE``."""
        return f"http://127.0.0.1:{self.port}/api/v{self.api_version}"

    @property
    def gateway_url(self) -> str:
        """Gateway URL (what ``GET /gateway/bot`` answers)."""
        return f"ws://127.0.0.1:{self.port}/gateway"

    @property
    def resume_gateway_url(self) -> str:
        """The ``resume_gateway_url`` sent in READY (a distinct path, so tests can see its use)."""
        return f"ws://127.0.0.1:{self.port}/resume-gateway"

    @property
    def live_connections(self) -> int:
        """Number of open gateway websockets."""
        return len(self._conns)

    @property
    def active_sessions(self) -> int:
        """Number of gateway sessions that can still be resumed or are connected."""
        return sum(1 for s in self._sessions.values() if s.alive)

    @contextlib.contextmanager
    def patch_discord(self) -> Iterator[None]:
        """Point discord.py (process-wide class attributes) at this fake; restore on exit."""
        import discord.gateway
        import discord.http
        import yarl

        route_cls, ws_cls = discord.http.Route, discord.gateway.DiscordWebSocket
        old_base, old_gateway = route_cls.BASE, ws_cls.DEFAULT_GATEWAY
        route_cls.BASE = self.api_base
        ws_cls.DEFAULT_GATEWAY = yarl.URL(self.gateway_url)
        try:
            yield
        finally:
            route_cls.BASE, ws_cls.DEFAULT_GATEWAY = old_base, old_gateway

    # -- world building ----------------------------------------------------------------------

    def _snowflake(self) -> int:
        # Time-based like Discord's (so snowflake_time() is plausible) and strictly increasing.
        now = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
        self._last_id = max(now, self._last_id + 1)
        return self._last_id

    @staticmethod
    def _user_payload(user_id: int, name: str, *, bot: bool = False) -> JSON:
        return {
            "id": str(user_id), "username": name, "discriminator": "0", "global_name": name,
            "avatar": None, "bot": bot, "system": False, "public_flags": 0, "flags": 0,
        }

    def add_guild(self, name: str) -> int:
        """Create a guild with an @everyone role that may post and open threads; the bot joins."""
        gid = self._snowflake()
        everyone = {
            "id": str(gid), "name": "@everyone", "permissions": str(_PERMS | _THREAD_PERMS),
            "position": 0, "color": 0, "hoist": False, "managed": False, "mentionable": False,
            "flags": 0,
        }
        self.guilds[gid] = {
            "id": str(gid), "name": name, "icon": None,
            # Not the bot: a guild owner bypasses every permission overwrite.
            "owner_id": str(self._snowflake()),
            "roles": [everyone], "emojis": [], "stickers": [], "features": [],
            "member_ids": [self.bot_id], "verification_level": 0,
            "default_message_notifications": 0, "explicit_content_filter": 0, "mfa_level": 0,
            "premium_tier": 0, "preferred_locale": "en-US", "nsfw_level": 0,
            "system_channel_flags": 0, "afk_timeout": 300, "large": False,
        }
        return gid

    def add_user(self, name: str, *, bot: bool = False, guild_ids: list[int] | None = None) -> int:
        """Create a user and make it a member of the given guilds (default: all)."""
        uid = self._snowflake()
        self.users[uid] = self._user_payload(uid, name, bot=bot)
        for gid in guild_ids if guild_ids is not None else list(self.guilds):
            self.guilds[gid]["member_ids"].append(uid)
        return uid

    def add_text_channel(self, guild_id: int, name: str, *, threads_allowed: bool = True) -> int:
        """Create a text channel; ``threads_allowed=False`` denies thread creation to @everyone."""
        cid = self._snowflake()
        overwrites = [] if threads_allowed else [
            {"id": str(guild_id), "type": 0, "allow": "0", "deny": str(_THREAD_PERMS)}
        ]
        self.channels[cid] = {
            "id": str(cid), "type": 0, "guild_id": str(guild_id), "name": name,
            "position": len(self.channels), "permission_overwrites": overwrites,
            "parent_id": None, "topic": None, "nsfw": False, "last_message_id": None,
            "rate_limit_per_user": 0, "default_auto_archive_duration": 1440, "flags": 0,
        }
        self._messages[cid] = {}
        return cid

    def _member_payload(self, user_id: int) -> JSON:
        return {
            "user": self.users[user_id], "roles": [], "joined_at": _iso(user_id), "deaf": False,
            "mute": False, "flags": 0, "nick": None, "avatar": None, "premium_since": None,
            "pending": False,
        }

    def _guild_create(self, gid: int) -> JSON:
        g = {k: v for k, v in self.guilds[gid].items() if k != "member_ids"}
        chans = [c for c in self.channels.values() if c["guild_id"] == str(gid)]
        g.update(
            unavailable=False,
            joined_at=_iso(gid),
            member_count=len(self.guilds[gid]["member_ids"]),
            channels=[c for c in chans if c["type"] == 0],
            threads=[c for c in chans if c["type"] in (11, 12)
                     and not c["thread_metadata"]["archived"]],
            members=[self._member_payload(u) for u in self.guilds[gid]["member_ids"]],
            voice_states=[], presences=[], stage_instances=[], guild_scheduled_events=[],
            soundboard_sounds=[],
        )
        return g

    def _channel(self, channel_id: int) -> JSON:
        try:
            return self.channels[channel_id]
        except KeyError:
            raise _ApiError(404, 10003, "Unknown Channel") from None

    def _message(self, channel_id: int, message_id: int) -> JSON:
        try:
            return self._messages[channel_id][message_id]
        except KeyError:
            raise _ApiError(404, 10008, "Unknown Message") from None

    def messages_in(self, channel_id: int) -> list[JSON]:
        """Final state of a channel or thread: message payloads, oldest first."""
        return [self._messages[channel_id][k] for k in sorted(self._messages[channel_id])]

    # -- scripting: what users do ------------------------------------------------------------

    async def user_says(
        self,
        channel_id: int,
        content: str,
        *,
        author_id: int | None = None,
        mention_bot: bool = False,
        thread_id: int | None = None,
        files: list[JSON] | None = None,
    ) -> int:
        """Post a message as a user (in ``thread_id`` if given) and dispatch MESSAGE_CREATE.

        ``files``: attachment objects (:meth:`add_attachment`).

        Returns:
            The new message id.
        """
        target = thread_id if thread_id is not None else channel_id
        chan = self._channel(target)
        if thread_id is not None and chan["parent_id"] != str(channel_id):
            raise ValueError(f"thread {thread_id} is not in channel {channel_id}")
        author = author_id if author_id is not None else self.user_id
        mentions: list[JSON] = []
        if mention_bot:
            content = f"<@{self.bot_id}> {content}"
            mentions.append(self.bot_user)
        msg = self._store_message(target, author, content, mentions=mentions,
                                  extra={"attachments": files} if files else None)
        await self._dispatch("MESSAGE_CREATE", msg)
        return int(msg["id"])

    def add_attachment(self, content: bytes, filename: str,
                       content_type: str = "application/octet-stream") -> JSON:
        """An attachment object served by the fake CDN (pass it in ``user_says(files=)``)."""
        aid = str(self._snowflake())
        self._cdn[f"{aid}/{filename}"] = content
        url = f"http://127.0.0.1:{self.port}/attachments/{aid}/{filename}"
        return {"id": aid, "filename": filename, "size": len(content),
                "content_type": content_type, "url": url, "proxy_url": url}

    def add_voice_message(self, content: bytes, *, duration_secs: float,
                          filename: str = "voice-message.ogg", content_type: str = "audio/ogg",
                          size: int | None = None) -> JSON:
        """A voice message's attachment (``duration_secs`` and a ``waveform``, as Discord's
        clients record them; pass it in ``user_says(files=)``); ``size``: what it declares
        instead of the content's length (an oversized one)."""
        att = self.add_attachment(content, filename, content_type)
        att.update(duration_secs=duration_secs, waveform="AAAAAAAAAAAA")
        if size is not None:
            att["size"] = size
        return att

    @route("GET /attachments", verb="GET", path="/attachments/{aid}/{name}")
    async def _cdn_file(self, request: web.Request) -> web.Response:
        key = f"{request.match_info['aid']}/{request.match_info['name']}"
        self.downloads.append(key)
        if key not in self._cdn:
            return web.Response(status=404)
        return web.Response(body=self._cdn[key])

    async def create_thread(
        self,
        channel_id: int,
        *,
        name: str,
        message_id: int | None = None,
        owner_id: int | None = None,
        private: bool = False,
    ) -> int:
        """Open a thread as a user (on ``message_id`` if given) and dispatch THREAD_CREATE."""
        thread = self._new_thread(channel_id, name, message_id=message_id,
                                  owner_id=owner_id or self.user_id, private=private)
        await self._dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return int(thread["id"])

    async def slash_command(
        self,
        guild_id: int,
        channel_id: int,
        name: str,
        user_id: int | None = None,
        *,
        options: list[JSON] | None = None,
    ) -> int:
        """Dispatch INTERACTION_CREATE for a chat-input command; returns the interaction id."""
        uid = user_id if user_id is not None else self.user_id
        cmd = next((c for c in self._commands.get(guild_id, []) if c["name"] == name), None)
        iid, token = self._snowflake(), f"itoken-{next(self._ids)}"
        member = {**self._member_payload(uid), "permissions": str(_PERMS | _THREAD_PERMS)}
        payload = {
            "id": str(iid), "application_id": str(self.bot_id), "type": 2, "token": token,
            "version": 1, "guild_id": str(guild_id), "channel_id": str(channel_id),
            "channel": self._channel(channel_id), "member": member,
            "guild": {"id": str(guild_id), "locale": "en-US", "features": []},
            "data": {"id": cmd["id"] if cmd else str(self._snowflake()), "name": name, "type": 1,
                     "options": options or [], "guild_id": str(guild_id)},
            "app_permissions": str(_PERMS | _THREAD_PERMS), "locale": "en-US",
            "guild_locale": "en-US", "entitlements": [], "context": 0,
            "authorizing_integration_owners": {"0": str(guild_id)},
            "attachment_size_limit": 26214400,
        }
        self._interactions[token] = {"id": iid, "channel_id": channel_id, "user_id": uid,
                                     "acked": False, "original": None, "payload": payload}
        await self._dispatch("INTERACTION_CREATE", payload)
        return iid

    def buttons(self, message_id: int) -> list[JSON]:
        """The buttons a message shows now (empty once an edit removed its components)."""
        msg = self._find_message(message_id)
        return [b for row in msg.get("components") or [] for b in row.get("components", [])
                if b.get("type") == 2]

    def _find_message(self, message_id: int) -> JSON:
        for msgs in self._messages.values():
            if message_id in msgs:
                return msgs[message_id]
        raise ValueError(f"no message {message_id}")

    async def user_clicks(
        self, message_id: int, label: str, *, user_id: int | None = None
    ) -> int:
        """A user clicks the button labelled ``label`` on a message: dispatches a
        MESSAGE_COMPONENT INTERACTION_CREATE (type 3) with a new interaction id and token, the
        message as it is now and ``data.custom_id``. Returns the interaction id.

        Raises:
            ValueError: the message shows no such button (nothing a user could click).
        """
        msg = self._find_message(message_id)
        button = next((b for b in self.buttons(message_id) if b.get("label") == label
                       and not b.get("disabled")), None)
        if button is None or "custom_id" not in button:
            raise ValueError(f"message {message_id} has no button {label!r} to click")
        cid, gid = int(msg["channel_id"]), int(msg["guild_id"])
        uid = user_id if user_id is not None else self.user_id
        iid, token = self._snowflake(), f"itoken-{next(self._ids)}"
        member = {**self._member_payload(uid), "permissions": str(_PERMS | _THREAD_PERMS)}
        payload = {
            "id": str(iid), "application_id": str(self.bot_id), "type": 3, "token": token,
            "version": 1, "guild_id": str(gid), "channel_id": str(cid),
            "channel": self._channel(cid), "member": member,
            "guild": {"id": str(gid), "locale": "en-US", "features": []},
            "message": json.loads(json.dumps(msg)),
            "data": {"custom_id": button["custom_id"], "component_type": 2},
            "app_permissions": str(_PERMS | _THREAD_PERMS), "locale": "en-US",
            "guild_locale": "en-US", "entitlements": [], "context": 0,
            "authorizing_integration_owners": {"0": str(gid)},
            "attachment_size_limit": 26214400,
        }
        # The interaction's "original response" is the message that carries the button.
        self._interactions[token] = {"id": iid, "channel_id": cid, "user_id": uid,
                                     "acked": False, "original": message_id,
                                     "component": True, "payload": payload}
        await self._dispatch("INTERACTION_CREATE", payload)
        return iid

    async def redeliver_interaction(self, interaction_id: int) -> None:
        """Dispatch an interaction's INTERACTION_CREATE again, same id and token (a
        redelivery, e.g. after a RESUME that replayed it)."""
        state = next(s for s in self._interactions.values() if s["id"] == interaction_id)
        await self._dispatch("INTERACTION_CREATE", state["payload"])

    # -- scripting: faults -------------------------------------------------------------------

    def fail_next(
        self,
        route_substring: str,
        *,
        status: int = 429,
        retry_after: float = 0.3,
        is_global: bool = False,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` REST requests whose ``"METHOD /path"`` contains the substring.

        429 gets Discord's rate-limit body and headers; other statuses a Discord error body.
        """
        self.inject(Fault(method=route_substring, partial=True, status=status, times=times,
                          retry_after=retry_after, detail={"is_global": is_global}))

    async def drop_connection(self, *, code: int = 4000) -> None:
        """Close every live gateway connection; the sessions stay resumable."""
        for conn in list(self._conns):
            conn.closed_by_server = True
            await conn.ws.close(code=code)

    async def invalidate_session(self, *, resumable: bool = False) -> None:
        """Send INVALID_SESSION to every live connection; non-resumable ends the session."""
        for session in list(self._sessions.values()):
            if session.conn is None or not session.alive:
                continue
            if not resumable:
                session.alive = False
            await session.conn.send({"op": _OP_INVALID_SESSION, "d": resumable})

    async def request_reconnect(self) -> None:
        """Send RECONNECT (op 7): the client should close and RESUME."""
        for session in list(self._sessions.values()):
            if session.conn is not None and session.alive:
                await session.conn.send({"op": _OP_RECONNECT, "d": None})

    def expire_sessions(self) -> None:
        """End every session without telling its client (as when Discord expires a session
        while the bot is away): the next RESUME gets INVALID_SESSION."""
        for session in self._sessions.values():
            session.alive = False

    def hold_gateway(self) -> None:
        """Make new gateway handshakes wait until :meth:`release_gateway`."""
        self._gateway_open.clear()

    def release_gateway(self) -> None:
        """Let held gateway handshakes proceed."""
        self._gateway_open.set()

    # A scripting helper: a default bound keeps a broken scenario from hanging the test run.
    async def wait_for(
        self,
        predicate: Callable[[], bool],
        *,
        timeout: float = 5.0,  # noqa: ASYNC109
    ) -> None:
        """Wait until ``predicate()`` holds (re-checked on every state change of the fake)."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(predicate)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- gateway -----------------------------------------------------------------------------

    def _visible(self, session: _Session, event: str, data: JSON) -> JSON | None:
        """Apply intent gating to one dispatch, as Discord does per session."""
        if event.startswith("MESSAGE_REACTION"):
            return data if session.intents & GUILD_MESSAGE_REACTIONS else None
        if not event.startswith("MESSAGE_"):
            return data
        if not session.intents & GUILD_MESSAGES:
            return None
        if event == "MESSAGE_DELETE" or session.intents & MESSAGE_CONTENT:
            return data
        mentioned = any(m["id"] == str(self.bot_id) for m in data.get("mentions", []))
        if mentioned or data.get("author", {}).get("id") == str(self.bot_id):
            return data
        return {**data, "content": "", "embeds": [], "attachments": [], "components": []}

    async def _dispatch(self, event: str, data: JSON) -> None:
        for session in list(self._sessions.values()):
            if not session.alive:
                continue
            visible = self._visible(session, event, data)
            if visible is not None:
                await self._dispatch_to(session, event, visible)
        await self._notify()

    @route("gateway", verb="GET", path="/gateway")
    @route("gateway", verb="GET", path="/resume-gateway")
    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        await self._gateway_open.wait()
        if self._stopping:
            raise web.HTTPServiceUnavailable()
        query = dict(request.query)
        self.connections.append({"path": request.path, **query})
        ws = web.WebSocketResponse(autoping=True, max_msg_size=0)
        await ws.prepare(request)
        compress = zlib.compressobj() if query.get("compress") == "zlib-stream" else None
        conn = _Connection(ws=ws, compressor=compress)
        self._conns.add(conn)
        session: _Session | None = None
        try:
            await conn.send({"op": _OP_HELLO,
                             "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
            async for msg in ws:
                if msg.type is not WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                session = await self._on_frame(conn, session, frame) or session
        finally:
            self._conns.discard(conn)
            if session is not None and session.conn is conn:
                session.conn = None
                # 1000/1001 from the client ends the session (Discord semantics); anything else,
                # or a close we initiated, keeps it resumable.
                if not conn.closed_by_server and ws.close_code in (1000, 1001):
                    session.alive = False
            await self._notify()
        return ws

    async def _on_frame(
        self, conn: _Connection, session: _Session | None, frame: JSON
    ) -> _Session | None:
        op = frame.get("op")
        raw = frame.get("d")
        data: JSON = raw if isinstance(raw, dict) else {}
        if op == _OP_HEARTBEAT:
            self.heartbeats += 1
            if self.ack_heartbeats:
                await conn.send({"op": _OP_ACK})
            await self._notify()
            return None
        if op in (_OP_IDENTIFY, _OP_RESUME) and session is not None:
            conn.closed_by_server = True
            await conn.ws.close(code=4005, message=b"Already authenticated.")
            return None
        if op == _OP_IDENTIFY:
            return await self._identify(conn, data)
        if op == _OP_RESUME:
            return await self._resume(conn, data)
        return None

    async def _identify(self, conn: _Connection, data: JSON) -> _Session | None:
        if data.get("token") != self.token:
            conn.closed_by_server = True
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return None
        self.identifies += 1
        session = _Session(session_id=f"session-{next(self._ids)}",
                           intents=int(data.get("intents", 0)), conn=conn)
        ready = {
            "v": self.api_version, "user": self.bot_user, "session_id": session.session_id,
            "resume_gateway_url": self.resume_gateway_url, "session_type": "normal",
            "guilds": [{"id": str(g), "unavailable": True} for g in self.guilds],
            "application": {"id": str(self.bot_id), "flags": 0},
            "private_channels": [], "relationships": [], "presences": [], "_trace": ["fake"],
        }
        await self._dispatch_to(session, "READY", ready)
        for gid in self.guilds:
            await self._dispatch_to(session, "GUILD_CREATE", self._guild_create(gid))
        # Registered only now: other dispatches must not precede READY.
        self._sessions[session.session_id] = session
        await self._notify()
        return session

    async def _dispatch_to(self, session: _Session, event: str, data: JSON) -> None:
        async with session.lock:
            session.seq += 1
            frame = {"op": _OP_DISPATCH, "t": event, "s": session.seq, "d": data}
            session.log.append(frame)
            # No live connection: the frame waits in the log for a RESUME.
            if session.conn is not None:
                await session.conn.send(frame)

    async def _resume(self, conn: _Connection, data: JSON) -> _Session | None:
        session = self._sessions.get(str(data.get("session_id")))
        if session is None or not session.alive or data.get("token") != self.token:
            await conn.send({"op": _OP_INVALID_SESSION, "d": False})
            return None
        self.resumes += 1
        if session.conn is not None and session.conn is not conn:
            session.conn.closed_by_server = True
            await session.conn.ws.close(code=4000)
        seq = int(data.get("seq") or 0)
        async with session.lock:
            session.conn = conn
            for frame in [f for f in session.log if f["s"] > seq]:
                await conn.send(frame)
        await self._dispatch_to(session, "RESUMED", {"_trace": ["fake"]})
        await self._notify()
        return session

    # -- REST plumbing -----------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if not path.startswith("/api/"):
            return await handler(request)
        rel = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else path
        key = f"{request.method} {rel}"
        self.requests.append((request.method, rel))
        try:
            rule = self.take_fault(key)
            if rule is not None:
                return self._failure(rule)
            webhook = rel.startswith(("/interactions/", "/webhooks/"))
            if not webhook and request.headers.get("Authorization") != f"Bot {self.token}":
                return _json({"message": "401: Unauthorized", "code": 0}, 401)
            if not webhook and self._over_global():
                self.limited += 1
                return self._failure(Fault(method=key, status=429, retry_after=1.0,
                                           detail={"is_global": True}))
            bucket = _MESSAGE_ROUTE.fullmatch(rel) if request.method != "GET" else None
            if bucket is None or self.channel_limit <= 0:
                return await handler(request)
            left, reset_after = self._take_channel(int(bucket.group(1)))
            if left < 0:
                self.limited += 1
                return self._failure(Fault(method=key, status=429, retry_after=reset_after))
            response = await handler(request)
            response.headers.update(self._bucket_headers(left, reset_after))
            return response
        except _ApiError as exc:
            return _json({"message": exc.message, "code": exc.code}, exc.status)
        except ValueError:  # a non-numeric snowflake or a malformed body
            return _json({"message": "Invalid Form Body", "code": 50035}, 400)
        finally:
            await self._notify()

    def _over_global(self) -> bool:
        """One request of the global budget; True: over it this second."""
        if self.global_per_s <= 0:
            return False
        now = time.monotonic()
        start, count = self._global_window
        if now - start >= 1.0:
            start, count = now, 0
        self._global_window = (start, count + 1)
        return count + 1 > self.global_per_s

    def _take_channel(self, channel: int) -> tuple[int, float]:
        """One request of ``channel``'s message bucket: (requests left, seconds until the
        window resets); left < 0: over it."""
        now = time.monotonic()
        end, count = self._windows.get(channel, (0.0, 0))
        if now >= end:
            end, count = now + self.channel_period_s, 0
        self._windows[channel] = (end, count + 1)
        return self.channel_limit - count - 1, end - now

    def _bucket_headers(self, left: int, reset_after: float) -> dict[str, str]:
        return {"X-RateLimit-Limit": str(self.channel_limit),
                "X-RateLimit-Remaining": str(left),
                "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
                "X-RateLimit-Reset-After": f"{reset_after:.3f}",
                "X-RateLimit-Bucket": "fakemessages", "X-RateLimit-Scope": "user"}

    @staticmethod
    def _failure(rule: Fault) -> web.Response:
        if rule.status != 429:
            return _json({"message": f"{rule.status}: fake failure", "code": 0}, rule.status)
        retry_after = rule.retry_after or 0.0
        is_global = bool(rule.detail.get("is_global"))
        body = {"message": "You are being rate limited.", "retry_after": retry_after,
                "global": is_global}
        headers = {
            "Retry-After": str(math.ceil(retry_after)),
            "X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": f"{time.time() + retry_after:.3f}",
            "X-RateLimit-Reset-After": f"{retry_after:.3f}",
            "X-RateLimit-Bucket": "fakebucket", "X-RateLimit-Scope": "user",
            # discord.py treats a 429 without Via as a Cloudflare ban and raises.
            "Via": "1.1 google",
        }
        if is_global:
            headers["X-RateLimit-Global"] = "true"
        return _json(body, 429, headers)

    async def _body(self, request: web.Request) -> tuple[JSON, list[_Part]]:
        """JSON body, or multipart ``payload_json`` plus the uploaded files."""
        if request.content_type.startswith("multipart/"):
            payload: JSON = {}
            files: list[_Part] = []
            form = await request.post()
            for name, value in form.items():
                if name == "payload_json":
                    payload = json.loads(str(value))
                elif isinstance(value, web.FileField):
                    files.append(_Part(str(value.filename), value.file.read(),
                                       value.content_type))
            if sum(len(f.data) for f in files) > self.max_upload_bytes:
                raise _ApiError(413, 40005, "Request entity too large")
            return payload, files
        if not request.can_read_body:
            return {}, []
        return dict(await request.json()), []

    # -- REST handlers -----------------------------------------------------------------------

    @_rest("GET", "/users/@me")
    async def _get_me(self, request: web.Request) -> web.Response:
        return _json(self.bot_user)

    @_rest("GET", "/oauth2/applications/@me")
    async def _get_application(self, request: web.Request) -> web.Response:
        return _json({
            "id": str(self.bot_id), "name": self.bot_user["username"], "description": "",
            "icon": None, "bot_public": False, "bot_require_code_grant": False,
            "owner": self.users[self.user_id], "verify_key": "00" * 32, "flags": 0,
            "bot": self.bot_user, "team": None, "summary": "",
        })

    @_rest("GET", "/gateway")
    @_rest("GET", "/gateway/bot")
    async def _get_gateway(self, request: web.Request) -> web.Response:
        limit = {"total": 1000, "remaining": 999, "reset_after": 86400000, "max_concurrency": 1}
        return _json({"url": self.gateway_url, "shards": 1, "session_start_limit": limit})

    @_rest("GET", _CH)
    async def _get_channel(self, request: web.Request) -> web.Response:
        return _json(self._channel(int(request.match_info["cid"])))

    @_rest("GET", _CH + "/messages")
    async def _get_messages(self, request: web.Request) -> web.Response:
        cid = int(request.match_info["cid"])
        self._channel(cid)
        q = request.query
        limit = max(1, min(100, int(q.get("limit", "50"))))
        ids = sorted(self._messages[cid])
        if "after" in q:
            # Discord returns the oldest `limit` messages after the id, newest first.
            chosen = [i for i in ids if i > int(q["after"])][:limit][::-1]
        elif "before" in q:
            chosen = [i for i in ids if i < int(q["before"])][::-1][:limit]
        elif "around" in q:
            around = int(q["around"])
            older = [i for i in ids if i < around][::-1][: limit // 2]
            newer = [i for i in ids if i >= around][: limit - len(older)]
            chosen = newer[::-1] + older
        else:
            chosen = ids[::-1][:limit]
        return _json([self._messages[cid][i] for i in chosen])

    @_rest("GET", _MSG)
    async def _get_message(self, request: web.Request) -> web.Response:
        cid, mid = int(request.match_info["cid"]), int(request.match_info["mid"])
        return _json(self._message(cid, mid))

    def _store_message(
        self,
        channel_id: int,
        author_id: int,
        content: str,
        *,
        mentions: list[JSON] | None = None,
        reference: JSON | None = None,
        attachments: list[_Part] | None = None,
        extra: JSON | None = None,
        store: bool = True,
    ) -> JSON:
        chan = self._channel(channel_id)
        mid = self._snowflake()
        guild_id = chan["guild_id"]
        msg: JSON = {
            "id": str(mid), "channel_id": str(channel_id), "guild_id": guild_id,
            "author": self.users[author_id], "content": content, "timestamp": _iso(mid),
            "edited_timestamp": None, "tts": False, "mention_everyone": False,
            "mentions": mentions or [], "mention_roles": [], "attachments": [
                self.add_attachment(f.data, f.filename,
                                    f.content_type or "application/octet-stream")
                for f in attachments or []
            ], "embeds": [], "reactions": [], "pinned": False, "type": 0, "flags": 0,
            "components": [], "member": {k: v for k, v in self._member_payload(author_id).items()
                                         if k != "user"},
            **(extra or {}),
        }
        if reference is not None:
            ref_id = int(reference["message_id"])
            ref_cid = int(reference.get("channel_id") or channel_id)
            ref = self._messages.get(ref_cid, {}).get(ref_id)
            if ref is None and reference.get("fail_if_not_exists", True):
                raise _ApiError(400, 50035, "Invalid Form Body: Unknown message")
            msg.update(type=19, referenced_message=ref, message_reference={
                "type": 0, "message_id": str(ref_id), "channel_id": str(ref_cid),
                "guild_id": guild_id})
        if not store:
            return msg
        self._messages[channel_id][mid] = msg
        chan["last_message_id"] = str(mid)
        if chan["type"] in (11, 12):
            chan["message_count"] += 1
            chan["total_message_sent"] += 1
        return msg

    def _check_content(self, body: JSON, files: list[_Part]) -> str:
        content = body.get("content")
        text = "" if content is None else str(content)
        if len(text) > MAX_CONTENT:
            raise _ApiError(400, 50035, "Invalid Form Body: content: Must be 2000 or fewer "
                                        "in length.")
        if not text and not body.get("embeds") and not files and not body.get("components"):
            raise _ApiError(400, 50006, "Cannot send an empty message")
        return text

    async def _create_bot_message(
        self, channel_id: int, body: JSON, files: list[_Part], extra: JSON | None = None
    ) -> JSON:
        text = self._check_content(body, files)
        msg = self._store_message(channel_id, self.bot_id, text,
                                  reference=body.get("message_reference"), attachments=files,
                                  extra=extra)
        if body.get("embeds"):
            msg["embeds"] = body["embeds"]
        if body.get("components"):
            msg["components"] = _check_components(body["components"])
        ref = msg.get("message_reference")
        for f in files:
            self.uploads.append(UploadedFile(channel_id=channel_id, message_id=int(msg["id"]),
                                             filename=f.filename, data=f.data,
                                             content_type=f.content_type, content=text))
        self.sent.append(SentMessage(channel_id=channel_id, message_id=int(msg["id"]),
                                     content=text, attachments=tuple(f.filename for f in files),
                                     reference=int(ref["message_id"]) if ref else None))
        await self._dispatch("MESSAGE_CREATE", msg)
        return msg

    @_rest("POST", _CH + "/messages")
    async def _post_message(self, request: web.Request) -> web.Response:
        cid = int(request.match_info["cid"])
        self._channel(cid)
        body, files = await self._body(request)
        msg = await self._create_bot_message(cid, body, files)
        if files:
            await self._held_upload()
        return _json(msg)

    @_rest("PATCH", _MSG)
    async def _patch_message(self, request: web.Request) -> web.Response:
        cid, mid = int(request.match_info["cid"]), int(request.match_info["mid"])
        msg = self._message(cid, mid)
        if msg["author"]["id"] != str(self.bot_id):
            raise _ApiError(403, 50005, "Cannot edit a message authored by another user")
        body, _ = await self._body(request)
        if "content" in body:
            content = "" if body["content"] is None else str(body["content"])
            if len(content) > MAX_CONTENT:
                raise _ApiError(400, 50035, "Invalid Form Body: content too long")
            msg["content"] = content
        if "embeds" in body:
            msg["embeds"] = body["embeds"] or []
        if "components" in body:
            msg["components"] = _check_components(body["components"] or [])
        msg["edited_timestamp"] = _iso(self._snowflake())
        self.edits.append((cid, mid, body.get("content")))
        await self._dispatch("MESSAGE_UPDATE", msg)
        return _json(msg)

    @_rest("DELETE", _MSG)
    async def _delete_message(self, request: web.Request) -> web.Response:
        cid, mid = int(request.match_info["cid"]), int(request.match_info["mid"])
        msg = self._message(cid, mid)
        del self._messages[cid][mid]
        self.deleted.append((cid, mid))
        await self._dispatch("MESSAGE_DELETE",
                             {"id": str(mid), "channel_id": str(cid), "guild_id": msg["guild_id"]})
        return _no_content()

    @_rest("PUT", _MSG + "/reactions/{emoji}/@me")
    async def _put_reaction(self, request: web.Request) -> web.Response:
        cid, mid = int(request.match_info["cid"]), int(request.match_info["mid"])
        emoji = request.match_info["emoji"]
        msg = self._message(cid, mid)
        name, _, eid = emoji.partition(":")
        if not any(r["emoji"]["name"] == name and r["me"] for r in msg["reactions"]):
            msg["reactions"].append({
                "emoji": {"id": eid or None, "name": name}, "count": 1, "me": True,
                "me_burst": False, "burst_colors": [], "count_details": {"burst": 0, "normal": 1},
            })
            self.reactions.append((cid, mid, emoji))
            await self._dispatch("MESSAGE_REACTION_ADD", {
                "user_id": str(self.bot_id), "channel_id": str(cid), "message_id": str(mid),
                "guild_id": msg["guild_id"], "emoji": {"id": eid or None, "name": name},
                "burst": False, "type": 0, "message_author_id": msg["author"]["id"],
                "member": self._member_payload(self.bot_id),
            })
        return _no_content()

    @_rest("DELETE", _MSG + "/reactions/{emoji}/@me")
    async def _delete_reaction(self, request: web.Request) -> web.Response:
        cid, mid = int(request.match_info["cid"]), int(request.match_info["mid"])
        name = request.match_info["emoji"].partition(":")[0]
        msg = self._message(cid, mid)
        msg["reactions"] = [r for r in msg["reactions"]
                            if not (r["emoji"]["name"] == name and r["me"])]
        return _no_content()

    @_rest("POST", _CH + "/typing")
    async def _post_typing(self, request: web.Request) -> web.Response:
        cid = int(request.match_info["cid"])
        self._channel(cid)
        self.typing.append(cid)
        return _no_content()

    def _new_thread(
        self, channel_id: int, name: str, *, message_id: int | None, owner_id: int,
        private: bool = False,
    ) -> JSON:
        parent = self._channel(channel_id)
        if parent["type"] != 0:
            raise _ApiError(400, 50024, "Cannot execute action on this channel type")
        if any(str(o["deny"]) != "0" for o in parent["permission_overwrites"]):
            raise _ApiError(403, 50013, "Missing Permissions")
        if message_id is not None:
            self._message(channel_id, message_id)
            if message_id in self.channels:
                raise _ApiError(400, 160004, "A thread has already been created for this message")
        # A thread started from a message shares the message's id (Discord invariant).
        tid = message_id if message_id is not None else self._snowflake()
        now = _iso(self._snowflake())
        thread: JSON = {
            "id": str(tid), "type": 12 if private else 11, "guild_id": parent["guild_id"],
            "parent_id": str(channel_id), "owner_id": str(owner_id), "name": name,
            "last_message_id": None, "message_count": 0, "member_count": 1,
            "rate_limit_per_user": 0, "flags": 0, "total_message_sent": 0,
            "thread_metadata": {"archived": False, "auto_archive_duration": 1440,
                                "archive_timestamp": now, "locked": False,
                                "create_timestamp": now,
                                **({"invitable": True} if private else {})},
        }
        self.channels[tid] = thread
        self._messages[tid] = {}
        self._thread_members[tid] = {owner_id}
        if message_id is not None:
            self._messages[channel_id][message_id]["thread"] = thread
        self.threads_created.append(thread)
        return thread

    def _thread_member(self, thread_id: int, user_id: int) -> JSON:
        return {"id": str(thread_id), "user_id": str(user_id), "flags": 0,
                "join_timestamp": self.channels[thread_id]["thread_metadata"]["create_timestamp"]}

    async def _bot_thread(self, channel_id: int, body: JSON, message_id: int | None) -> JSON:
        private = body.get("type") == 12
        thread = self._new_thread(channel_id, str(body.get("name") or "thread"),
                                  message_id=message_id, owner_id=self.bot_id, private=private)
        if "auto_archive_duration" in body:
            thread["thread_metadata"]["auto_archive_duration"] = body["auto_archive_duration"]
        tid = int(thread["id"])
        full = {**thread, "newly_created": True, "member": self._thread_member(tid, self.bot_id)}
        await self._dispatch("THREAD_CREATE", full)
        return full

    @_rest("POST", _MSG + "/threads")
    async def _post_thread_from_message(self, request: web.Request) -> web.Response:
        body, _ = await self._body(request)
        cid, mid = int(request.match_info["cid"]), int(request.match_info["mid"])
        return _json(await self._bot_thread(cid, body, mid), 201)

    @_rest("POST", _CH + "/threads")
    async def _post_thread(self, request: web.Request) -> web.Response:
        body, _ = await self._body(request)
        return _json(await self._bot_thread(int(request.match_info["cid"]), body, None), 201)

    @_rest("PUT", _CH + "/thread-members/@me")
    async def _join_thread(self, request: web.Request) -> web.Response:
        tid = int(request.match_info["cid"])
        if self._channel(tid)["type"] not in (11, 12):
            raise _ApiError(400, 50024, "Cannot execute action on this channel type")
        self._thread_members[tid].add(self.bot_id)
        return _no_content()

    @_rest("GET", "/guilds/{gid}/threads/active")
    async def _get_active_threads(self, request: web.Request) -> web.Response:
        gid = request.match_info["gid"]
        threads = [c for c in self.channels.values() if c["guild_id"] == gid
                   and c["type"] in (11, 12) and not c["thread_metadata"]["archived"]]
        members = [self._thread_member(int(t["id"]), self.bot_id) for t in threads
                   if self.bot_id in self._thread_members[int(t["id"])]]
        return _json({"threads": threads, "members": members})

    @staticmethod
    def _scope(request: web.Request) -> int | None:
        gid = request.match_info.get("gid")
        return int(gid) if gid is not None else None

    def _command(self, body: JSON, scope: int | None, old: list[JSON]) -> JSON:
        prior = next((c for c in old if c["name"] == body.get("name")), None)
        return {
            "type": 1, "description": "", "options": [], **body,
            "id": prior["id"] if prior else str(self._snowflake()),
            "application_id": str(self.bot_id), "version": str(self._snowflake()),
            "default_member_permissions": body.get("default_member_permissions"),
            "dm_permission": body.get("dm_permission", True), "nsfw": body.get("nsfw", False),
            **({"guild_id": str(scope)} if scope is not None else {}),
        }

    @_rest("GET", _CMDS)
    @_rest("GET", "/applications/{app}/commands")
    async def _get_commands(self, request: web.Request) -> web.Response:
        return _json(self._commands.get(self._scope(request), []))

    @_rest("PUT", _CMDS)
    @_rest("PUT", "/applications/{app}/commands")
    async def _put_commands(self, request: web.Request) -> web.Response:
        scope = self._scope(request)
        body = await request.json()
        old = self._commands.get(scope, [])
        self._commands[scope] = [self._command(c, scope, old) for c in body]
        self.command_syncs.append((scope, [c["name"] for c in body]))
        return _json(self._commands[scope])

    @_rest("POST", _CMDS)
    @_rest("POST", "/applications/{app}/commands")
    async def _post_command(self, request: web.Request) -> web.Response:
        scope = self._scope(request)
        body, _ = await self._body(request)
        old = self._commands.get(scope, [])
        cmd = self._command(body, scope, old)
        self._commands[scope] = [c for c in old if c["name"] != cmd["name"]] + [cmd]
        self.command_syncs.append((scope, [cmd["name"]]))
        return _json(cmd, 201)

    def _interaction(self, token: str) -> JSON:
        try:
            return self._interactions[token]
        except KeyError:
            raise _ApiError(404, 10015, "Unknown Webhook") from None

    @_rest("POST", "/interactions/{iid}/{token}/callback")
    async def _interaction_callback(self, request: web.Request) -> web.Response:
        state = self._interaction(request.match_info["token"])
        if state["id"] != int(request.match_info["iid"]):
            raise _ApiError(404, 10062, "Unknown interaction")
        if state["acked"]:
            raise _ApiError(400, 40060, "Interaction has already been acknowledged.")
        body, files = await self._body(request)
        kind, data = int(body.get("type", 0)), body.get("data") or {}
        if kind not in (1, 4, 5, 6, 7, 8, 9):
            raise _ApiError(400, 50035, "Invalid Form Body: type")
        state["acked"] = True
        ephemeral = bool(int(data.get("flags") or 0) & 64)
        self.interaction_responses.append(InteractionResponse(
            interaction_id=state["id"], kind="callback", type=kind,
            content=data.get("content"), ephemeral=ephemeral))
        resource: JSON = {"type": kind}
        if kind in (6, 7) and not state.get("component"):
            raise _ApiError(400, 50035, "Invalid Form Body: type: this interaction cannot "
                                        "update a message")
        if kind == 7:  # UPDATE_MESSAGE: edit the message the clicked component is on
            msg = self._message(state["channel_id"], state["original"])
            if "content" in data:
                msg["content"] = str(data["content"] or "")
            if "components" in data:
                msg["components"] = _check_components(data["components"] or [])
            msg["edited_timestamp"] = _iso(self._snowflake())
            self.edits.append((state["channel_id"], state["original"], data.get("content")))
            await self._dispatch("MESSAGE_UPDATE", msg)
            resource["message"] = msg
        if kind == 4 and not ephemeral:
            msg = await self._create_bot_message(state["channel_id"], data, files,
                                                 extra={"type": 20})
            state["original"] = int(msg["id"])
            resource["message"] = msg
        if "with_response" not in request.query:
            return _no_content()
        return _json({"interaction": {
            "id": str(state["id"]), "type": 3 if state.get("component") else 2,
            "response_message_id": (
                str(state["original"]) if state["original"] else None),
            "response_message_loading": kind == 5, "response_message_ephemeral": ephemeral,
        }, "resource": resource})

    @_rest("POST", "/webhooks/{app}/{token}")
    async def _webhook_followup(self, request: web.Request) -> web.Response:
        state = self._interaction(request.match_info["token"])
        body, files = await self._body(request)
        ephemeral = bool(int(body.get("flags") or 0) & 64)
        self.interaction_responses.append(InteractionResponse(
            interaction_id=state["id"], kind="followup", type=None,
            content=body.get("content"), ephemeral=ephemeral))
        if ephemeral:
            # Seen only by the invoking user: not in history, not dispatched.
            text = self._check_content(body, files)
            msg = self._store_message(state["channel_id"], self.bot_id, text, store=False,
                                      extra={"flags": 64})
        else:
            msg = await self._create_bot_message(state["channel_id"], body, files)
        return _json(msg)

    @_rest("PATCH", "/webhooks/{app}/{token}/messages/{mid}")
    async def _webhook_edit(self, request: web.Request) -> web.Response:
        state = self._interaction(request.match_info["token"])
        body, files = await self._body(request)
        self.interaction_responses.append(InteractionResponse(
            interaction_id=state["id"], kind="edit_original", type=None,
            content=body.get("content"), ephemeral=False))
        cid, mid = state["channel_id"], request.match_info["mid"]
        if mid == "@original" and state["original"] is None:
            # Editing a deferred response posts it (Discord replaces the "thinking" message).
            msg = await self._create_bot_message(cid, body, files, extra={"type": 20})
            state["original"] = int(msg["id"])
            return _json(msg)
        target = state["original"] if mid == "@original" else int(mid)
        msg = self._message(cid, target)
        if "content" in body:
            msg["content"] = str(body["content"] or "")
        if "components" in body:
            msg["components"] = _check_components(body["components"] or [])
        msg["edited_timestamp"] = _iso(self._snowflake())
        self.edits.append((cid, target, body.get("content")))
        await self._dispatch("MESSAGE_UPDATE", msg)
        return _json(msg)
