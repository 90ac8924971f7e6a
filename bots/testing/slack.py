"""A wire-level fake of Slack (Web API, Socket Mode, Events API sender), for tests and demos.

What is simulated, over real HTTP / WebSocket on 127.0.0.1, so slack_sdk and slack-bolt run
unchanged against :attr:`FakeSlack.base_url`:

- Web API methods ``auth.test``, ``chat.postMessage``, ``chat.update``, ``chat.delete``,
  ``chat.postEphemeral`` (recorded in :attr:`FakeSlack.ephemerals`),
  ``reactions.add`` / ``reactions.remove``, ``conversations.history`` / ``.replies`` / ``.info``
  (with ``oldest``/``latest``/``inclusive``/``limit``/``cursor``), ``users.info``,
  ``files.info`` (+ ``url_private``), the upload flow of ``files_upload_v2``
  (``files.getUploadURLExternal``, a POST of the bytes to its ``upload_url``,
  ``files.completeUploadExternal``: the file is shared in the channel / thread as a message
  with ``files``; recorded in :attr:`FakeSlack.uploads` with its bytes;
  :meth:`FakeSlack.hold_upload_answers` lets an upload take effect while its answer waits),
  chat streaming (``chat.startStream`` / ``appendStream`` / ``stopStream``, with
  ``markdown_text`` or slack_sdk ChatStream's ``markdown_text`` chunks; a message keeps
  ``"streaming": True`` until stopped or replaced by ``chat.update``; ``chat_streaming=False``
  answers ``unknown_method``),
  ``assistant.threads.setStatus`` and ``apps.connections.open`` (app token only; returns a
  loopback ``ws://`` URL). Tokens come from the ``Authorization`` header or a ``token`` param;
  an unknown one is ``invalid_auth``. Bodies may be JSON, form-encoded or query strings.
- Socket Mode: ``hello`` on connect, ``events_api`` / ``slash_commands`` envelopes, acks
  recorded in :attr:`FakeSlack.acks`; unacked envelopes are redelivered (``retry_attempt`` + 1)
  on the next connection or on demand, and :meth:`FakeSlack.disconnect_all` drops connections
  (gracefully with a ``disconnect`` message, or abruptly).
- Events API over HTTP: :meth:`FakeSlack.post_event` signs with Slack's v0 scheme
  (``X-Slack-Signature``, ``X-Slack-Request-Timestamp``, ``X-Slack-Retry-Num/-Reason``) and can
  forge bad, stale or missing signatures; :meth:`FakeSlack.post_url_verification` sends the
  challenge. Slash commands go either way (socket envelope or signed form POST).
- Interactivity: :meth:`FakeSlack.click` presses a button of a stored message (found by its
  label or ``action_id`` in the message's current blocks) as a ``block_actions`` payload: an
  ``interactive`` envelope over Socket Mode, or a signed ``payload=<json>`` form POST to the
  Request URL. :meth:`FakeSlack.action_payload` / :meth:`FakeSlack.send_action` split that in
  two (a double click: two payloads built before either is handled; a retried POST). Unlike
  events, Slack neither holds nor retries an interaction: with no Socket Mode connection the
  click raises ``ConnectionError`` (the clicker sees an error; nothing is delivered later), and
  an unacked ``interactive`` envelope is not redelivered on a new connection (only
  :meth:`FakeSlack.redeliver` sends one again, for duplicate-delivery tests).
- Messages keep their ``blocks``: ``chat.update`` without ``blocks`` keeps the old ones, as
  Slack does (``blocks=[]`` removes them). Block shape is checked loosely (block types, a
  section's 3000 characters, a button's ``action_id`` / label / value).
- A channel store: :meth:`FakeSlack.user_posts` stores the message (history and replies return
  it) and delivers its events, to ``events_url`` when set, otherwise over Socket Mode (queued
  while no client is connected). A top-level mention in a channel yields both ``message`` and
  ``app_mention`` events, as Slack does for apps subscribed to both (``double_delivery``).

How to script it::

    async with FakeSlack() as slack:
        app = AsyncApp(client=AsyncWebClient(token=slack.bot_token, base_url=slack.base_url))
        ...
        ts = await slack.user_posts("C1", f"<@{slack.bot_user_id}> hi", user="U1")
        await slack.wait_until(lambda: slack.posts)
        slack.fail_next("chat.postMessage", status=429, retry_after=1)

Not simulated: OAuth / multiple workspaces, Block Kit validation beyond shape, Slack's
own timed retries of unacknowledged events (call :meth:`FakeSlack.redeliver` or reconnect).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import math
import mimetypes
import secrets
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp
import structlog
from aiohttp import web

from bots.testing._fakebase import Fault, RoutedFake, route
from bots.testing._uploads import UploadHold

log = structlog.get_logger(__name__)

JSONDict = dict[str, Any]

__all__ = [
    "FakeSlack",
    "SlackCall",
    "SlackHttpResult",
    "SlackPost",
    "SlackUpload",
    "sign_slack_request",
]

_MAX_TEXT = 40_000
_MAX_BLOCKS = 50


def _stream_text(params: Mapping[str, Any]) -> str:
    """A streaming call's text: ``markdown_text``, then its ``markdown_text`` chunks (what
    slack_sdk's ChatStream sends)."""
    text = str(params.get("markdown_text") or "")
    chunks = params.get("chunks")
    if isinstance(chunks, str):
        chunks = json.loads(chunks)
    for chunk in chunks if isinstance(chunks, list) else []:
        if isinstance(chunk, dict) and chunk.get("type") == "markdown_text":
            text += str(chunk.get("text") or "")
    return text


def sign_slack_request(signing_secret: str, timestamp: str, body: str) -> str:
    """Slack's v0 request signature: ``v0=`` + HMAC-SHA256 of ``v0:{timestamp}:{body}``."""
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()


@dataclass(kw_only=True)
class SlackCall:
    """One Web API request as the fake saw it (``error`` is set when it answered ok=false)."""

    method: str
    params: JSONDict
    token: str | None
    status: int = 200
    error: str | None = None


@dataclass(kw_only=True)
class SlackPost:
    """A ``chat.postMessage`` / ``chat.update`` / ``chat.delete`` that took effect."""

    method: str
    channel: str
    ts: str
    text: str
    thread_ts: str | None = None
    blocks: list[Any] | None = None


@dataclass(kw_only=True)
class SlackUpload:
    """A file the app uploaded and shared (``files.completeUploadExternal`` took effect)."""

    file_id: str
    filename: str
    title: str
    data: bytes
    channel: str
    thread_ts: str | None
    initial_comment: str | None
    ts: str  # the message that shares it


@dataclass(kw_only=True)
class SlackHttpResult:
    """What an HTTP endpoint answered to a delivery from :class:`FakeSlack`."""

    status: int
    body: str
    event_id: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body)


def _text_ok(obj: Any, limit: int) -> bool:
    return (isinstance(obj, dict) and obj.get("type") in ("plain_text", "mrkdwn")
            and isinstance(obj.get("text"), str) and 0 < len(obj["text"]) <= limit)


def _block_ok(block: Any) -> bool:
    """Loosely, what Slack's Block Kit validation would refuse (``invalid_blocks``)."""
    if not isinstance(block, dict):
        return False
    kind = block.get("type")
    if kind == "section":
        return ("text" in block and _text_ok(block["text"], 3000)) or "fields" in block
    if kind == "actions":
        elements = block.get("elements")
        if not isinstance(elements, list) or not 0 < len(elements) <= 25:
            return False
        ids = [e.get("action_id") for e in elements if isinstance(e, dict)]
        if len(ids) != len(elements) or len(set(ids)) != len(ids):
            return False  # action_ids must be unique within the block
        for el in elements:
            if el.get("type") == "button" and not (
                    _text_ok(el.get("text"), 75) and el["text"]["type"] == "plain_text"
                    and len(str(el.get("value", ""))) <= 2000
                    and el.get("style") in (None, "primary", "danger")):
                return False
        return True
    return kind in ("context", "divider", "header", "image", "rich_text", "input", "file",
                    "video")


class _SlackError(Exception):
    def __init__(self, error: str, *, status: int = 200, headers: Mapping[str, str] | None = None):
        super().__init__(error)
        self.error = error
        self.status = status
        self.headers = dict(headers or {})


class FakeSlack(RoutedFake, UploadHold):
    """Fake Slack workspace with one app; see the module docstring for what it simulates.

    Args:
        bot_token: the ``xoxb-`` token the Web API accepts.
        app_token: the ``xapp-`` token for ``apps.connections.open``.
        signing_secret: default secret for signed HTTP deliveries.
        events_url: when set, :meth:`user_posts` and :meth:`slash_command` POST here instead of
            using Socket Mode.
        double_delivery: a top-level channel mention yields ``message`` and ``app_mention``.
        echo_bot_messages: the app's own posts are delivered back as ``message`` events (as
            Slack does for apps subscribed to channel messages).
        chat_streaming: serve chat.startStream / appendStream / stopStream.
        update_limit: ``chat.update`` calls the workspace may make per ``update_period_s``
            (Slack's Tier 3; a bucket that size refilled at that rate; 0: no limit); past it
            a call answers 429 ``ratelimited`` with ``Retry-After``, counted in
            :attr:`limited`.
    """

    def __init__(
        self,
        *,
        bot_token: str = "xoxb-fake-bot-token",
        app_token: str = "xapp-fake-app-token",
        signing_secret: str = "fake-signing-secret",
        team_id: str = "T0FAKE",
        app_id: str = "A0FAKE",
        bot_user_id: str = "U0BOT",
        bot_id: str = "B0BOT",
        events_url: str | None = None,
        double_delivery: bool = True,
        echo_bot_messages: bool = False,
        chat_streaming: bool = True,
        update_limit: int = 0,
        update_period_s: float = 60.0,
    ) -> None:
        super().__init__()
        self.update_limit = update_limit
        self.update_period_s = update_period_s
        #: (tokens left, monotonic time counted); None: full
        self._update_tokens: tuple[float, float] | None = None
        #: 429s the chat.update budget answered
        self.limited = 0
        #: False: chat.startStream / appendStream / stopStream answer ``unknown_method``
        #: (a workspace or API without chat streaming)
        self.chat_streaming = chat_streaming
        self.bot_token = bot_token
        self.app_token = app_token
        self.signing_secret = signing_secret
        self.team_id = team_id
        self.app_id = app_id
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.events_url = events_url
        self.double_delivery = double_delivery
        self.echo_bot_messages = echo_bot_messages
        self.calls: list[SlackCall] = []
        self.posts: list[SlackPost] = []
        self.reactions: list[JSONDict] = []
        self.statuses: list[JSONDict] = []
        #: chat.postEphemeral calls that took effect (channel, user, text, thread_ts)
        self.ephemerals: list[JSONDict] = []
        self.acks: list[str] = []
        self.ack_payloads: dict[str, Any] = {}
        self.envelopes: dict[str, JSONDict] = {}
        self.deliveries: list[tuple[str, int]] = []  # (envelope_id, retry_attempt) sent
        self.http_deliveries: list[SlackHttpResult] = []
        self.connections_opened = 0
        #: files served by ``files.info`` and their ``url_private`` (bot token required),
        #: and the ids of each download
        self._files: dict[str, tuple[JSONDict, bytes]] = {}
        self.downloads: list[str] = []
        #: uploads shared into a conversation, in order (bytes included)
        self.uploads: list[SlackUpload] = []
        #: file id -> (filename, declared length, bytes POSTed to its upload_url or None)
        self._staged: dict[str, tuple[str, int, bytes | None]] = {}
        self._channels: dict[str, JSONDict] = {}
        self._users: dict[str, JSONDict] = {}
        self._messages: dict[str, dict[str, JSONDict]] = {}
        self._tickets: set[str] = set()
        self._sockets: list[web.WebSocketResponse] = []
        self._undelivered: list[str] = []
        self._delivered_on: dict[str, web.WebSocketResponse] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._rr = itertools.count()
        self._event_ids = itertools.count(1)
        self._last_ts = 0.0
        self.add_user(bot_user_id, name="geode", is_bot=True)

    # ----------------------------------------------------------------- lifecycle
    @property
    def base_url(self) -> str:
        """What slack_sdk takes as ``base_url`` (ends with ``/api/``)."""
        return f"http://127.0.0.1:{self._port}/api/"

    async def start(self) -> None:
        """Listen on a random loopback port."""
        await self._serve_routes()
        log.debug("fake_slack.started", port=self._port)

    async def stop(self) -> None:
        """Close every socket and stop serving."""
        for task in list(self._tasks):
            task.cancel()
        for ws in list(self._sockets):
            await ws.close()
        await self._close()

    # ----------------------------------------------------------------- scripting
    def add_channel(
        self, channel: str, *, name: str | None = None, is_private: bool = False
    ) -> JSONDict:
        """Register a conversation (``C…`` channel, ``G…`` private, ``D…`` DM)."""
        is_im = channel.startswith("D")
        info: JSONDict = {
            "id": channel,
            "name": name or channel.lower(),
            "is_channel": channel.startswith("C"),
            "is_group": channel.startswith("G"),
            "is_im": is_im,
            "is_mpim": False,
            "is_private": is_private or channel.startswith("G") or is_im,
            "is_member": True,
            "is_archived": False,
            "created": int(time.time()),
            "context_team_id": self.team_id,
        }
        self._channels[channel] = info
        self._messages.setdefault(channel, {})
        return info

    def add_user(self, user: str, *, name: str | None = None, is_bot: bool = False) -> JSONDict:
        """Register a workspace member (``user_posts`` does this on first use)."""
        name = name or user.lower()
        info: JSONDict = {
            "id": user,
            "team_id": self.team_id,
            "name": name,
            "real_name": name.title(),
            "deleted": False,
            "is_bot": is_bot,
            "is_app_user": False,
            "tz": "UTC",
            "profile": {"display_name": name, "real_name": name.title()},
        }
        self._users[user] = info
        return info

    async def user_posts(
        self,
        channel: str,
        text: str,
        user: str,
        thread_ts: str | None = None,
        *,
        deliver: bool = True,
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        """Store a user's message and deliver its events; returns its ``ts``.

        ``deliver=False`` only stores it (a message posted while the app was not listening,
        for catch-up through ``conversations.history``). ``extra`` is merged into the message
        (e.g. ``{"bot_id": "B9"}`` or ``{"subtype": "file_share"}``).
        """
        if channel not in self._channels:
            self.add_channel(channel)
        if user not in self._users:
            self.add_user(user)
        msg: JSONDict = {
            "type": "message",
            "user": user,
            "text": text,
            "ts": self._new_ts(),
            "team": self.team_id,
            "client_msg_id": str(uuid.uuid4()),
        }
        msg.update(extra or {})
        self._store(channel, msg, thread_ts)
        if deliver:
            for event in self._events_for(channel, msg):
                await self.deliver_event(event)
        return str(msg["ts"])

    async def deliver_event(self, event: Mapping[str, Any], *, event_id: str | None = None) -> str:
        """Deliver one inner event (``{"type": ...}``) the configured way; returns envelope or
        event id."""
        callback = self._event_callback(event, event_id=event_id)
        if self.events_url is not None:
            result = await self.post_event(self.events_url, callback)
            return result.event_id or ""
        envelope = {
            "envelope_id": str(uuid.uuid4()),
            "type": "events_api",
            "payload": callback,
            "accepts_response_payload": False,
            "retry_attempt": 0,
            "retry_reason": "",
        }
        await self._send_envelope(envelope)
        return str(envelope["envelope_id"])

    async def slash_command(
        self, command: str, text: str, channel: str, user: str, *, url: str | None = None
    ) -> str | SlackHttpResult:
        """Invoke a slash command: over Socket Mode (returns the envelope id) or, when ``url``
        or ``events_url`` is set, as a signed form POST (returns the HTTP result)."""
        if channel not in self._channels:
            self.add_channel(channel)
        payload = {
            "token": "fake-verification-token",
            "team_id": self.team_id,
            "team_domain": "fake",
            "channel_id": channel,
            "channel_name": self._channels[channel]["name"],
            "user_id": user,
            "user_name": self._users.get(user, {}).get("name", user.lower()),
            "command": command,
            "text": text,
            "api_app_id": self.app_id,
            "is_enterprise_install": "false",
            "response_url": f"http://127.0.0.1:{self._port}/response/{uuid.uuid4().hex}",
            "trigger_id": f"{secrets.randbelow(10**9)}.{secrets.randbelow(10**9)}",
        }
        target = url or self.events_url
        if target is not None:
            body = urlencode(payload)
            return await self._signed_post(
                target, body, "application/x-www-form-urlencoded", self.signing_secret
            )
        envelope = {
            "envelope_id": str(uuid.uuid4()),
            "type": "slash_commands",
            "payload": payload,
            "accepts_response_payload": True,
            "retry_attempt": 0,
            "retry_reason": "",
        }
        await self._send_envelope(envelope)
        return str(envelope["envelope_id"])

    def action_payload(
        self, channel: str, ts: str, user: str, button: str, *, team: str | None = None
    ) -> JSONDict:
        """The ``block_actions`` payload of ``user`` pressing ``button`` (its label or its
        ``action_id``) on the stored message ``ts``, as Slack builds it. Raises
        ``LookupError`` when the message shows no such button (removed, or never there)."""
        msg = self._message(channel, ts)
        found = [(block, el) for block in msg.get("blocks") or []
                 if block.get("type") == "actions" for el in block.get("elements") or []
                 if el.get("type") == "button"
                 and button in (el.get("text", {}).get("text"), el.get("action_id"))]
        if not found:
            raise LookupError(f"message {ts} shows no button {button!r}")
        block, el = found[0]
        if user not in self._users:
            self.add_user(user)
        info = self._users[user]
        container: JSONDict = {"type": "message", "message_ts": ts, "channel_id": channel,
                               "is_ephemeral": False}
        if msg.get("thread_ts"):
            container["thread_ts"] = msg["thread_ts"]
        action_ts = self._new_ts()
        return {
            "type": "block_actions",
            "user": {"id": user, "username": info["name"], "name": info["name"],
                     "team_id": self.team_id},
            "api_app_id": self.app_id,
            "token": "fake-verification-token",
            "container": container,
            "trigger_id": f"{secrets.randbelow(10**12)}.{secrets.randbelow(10**12)}."
                          f"{secrets.token_hex(16)}",
            "team": {"id": team or self.team_id, "domain": "fake"},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {"id": channel, "name": self._channels[channel]["name"]},
            "message": {k: v for k, v in msg.items() if k not in ("reply_users",)},
            "state": {"values": {}},
            "response_url": f"http://127.0.0.1:{self._port}/actions/{uuid.uuid4().hex}",
            "actions": [{
                "action_id": el.get("action_id"), "block_id": block.get("block_id", ""),
                "text": el.get("text"), "value": el.get("value", ""),
                "style": el.get("style"), "type": "button", "action_ts": action_ts,
            }],
        }

    async def send_action(
        self, payload: Mapping[str, Any], *, url: str | None = None,
        retry_num: int | None = None, bad_signature: bool = False,
    ) -> str | SlackHttpResult:
        """Deliver an interactive payload: as a signed form POST (``payload=<json>``) to
        ``url`` or :attr:`events_url` when set (returns the HTTP result), else as an
        ``interactive`` envelope over Socket Mode (returns the envelope id)."""
        target = url or self.events_url
        if target is not None:
            headers = {}
            if retry_num is not None:
                headers["X-Slack-Retry-Num"] = str(retry_num)
                headers["X-Slack-Retry-Reason"] = "http_timeout"
            result = await self._signed_post(
                target, urlencode({"payload": json.dumps(payload)}),
                "application/x-www-form-urlencoded", self.signing_secret,
                bad_signature=bad_signature, extra_headers=headers,
            )
            self.http_deliveries.append(result)
            self._wake()
            return result
        if not self.connected:
            raise ConnectionError("no Socket Mode connection: Slack shows the clicker an error")
        envelope = {
            "envelope_id": str(uuid.uuid4()),
            "type": "interactive",
            "payload": dict(payload),
            "accepts_response_payload": False,
            "retry_attempt": 0,
            "retry_reason": "",
        }
        await self._send_envelope(envelope)
        return str(envelope["envelope_id"])

    async def click(
        self, channel: str, ts: str, user: str, button: str, *, url: str | None = None
    ) -> str | SlackHttpResult:
        """``user`` presses ``button`` on message ``ts`` (see :meth:`action_payload` and
        :meth:`send_action`)."""
        return await self.send_action(self.action_payload(channel, ts, user, button), url=url)

    async def redeliver(self, envelope_id: str, retry_num: int = 1) -> None:
        """Send an envelope again, as Slack does when it was not acked in time."""
        envelope = {
            **self.envelopes[envelope_id],
            "retry_attempt": retry_num,
            "retry_reason": "timeout",
        }
        await self._send_envelope(envelope)

    async def disconnect_all(self, reason: str | None = "refresh_requested") -> None:
        """Drop every Socket Mode connection: with a ``disconnect`` message first (``reason``),
        or abruptly (``reason=None``)."""
        for ws in list(self._sockets):
            if reason is not None and not ws.closed:
                with contextlib.suppress(ConnectionError):
                    await ws.send_json(
                        {"type": "disconnect", "reason": reason, "debug_info": {"host": "fake"}}
                    )
            await ws.close()
            with contextlib.suppress(ValueError):
                self._sockets.remove(ws)
        self._wake()

    @property
    def connected(self) -> int:
        """Number of open Socket Mode connections."""
        return sum(1 for ws in self._sockets if not ws.closed)

    @property
    def unacked(self) -> list[str]:
        """Envelope ids sent (or queued) but not acked."""
        return [e for e in self.envelopes if e not in self.ack_payloads]

    async def post_event(
        self,
        url: str,
        event: Mapping[str, Any],
        signing_secret: str | None = None,
        *,
        retry_num: int | None = None,
        retry_reason: str = "http_timeout",
        timestamp: int | None = None,
        bad_signature: bool = False,
        missing_headers: bool = False,
        event_id: str | None = None,
    ) -> SlackHttpResult:
        """POST an Events API request, signed like Slack (or deliberately not).

        ``event`` is an inner event (wrapped in an ``event_callback``) or a full payload with a
        ``type`` of ``event_callback`` / ``url_verification``. ``timestamp`` forges the signed
        time (e.g. 10 minutes ago for a stale request).
        """
        body = dict(event)
        if body.get("type") not in ("event_callback", "url_verification"):
            body = self._event_callback(body, event_id=event_id)
        headers = {}
        if retry_num is not None:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = retry_reason
        result = await self._signed_post(
            url,
            json.dumps(body),
            "application/json",
            signing_secret or self.signing_secret,
            timestamp=timestamp,
            bad_signature=bad_signature,
            missing_headers=missing_headers,
            extra_headers=headers,
        )
        result.event_id = body.get("event_id")
        self.http_deliveries.append(result)
        self._wake()
        return result

    async def post_url_verification(
        self, url: str, signing_secret: str | None = None
    ) -> tuple[str, SlackHttpResult]:
        """Send the ``url_verification`` challenge; returns (challenge, result)."""
        challenge = secrets.token_urlsafe(16)
        body = {"token": "fake-verification-token", "challenge": challenge}
        result = await self.post_event(url, {**body, "type": "url_verification"}, signing_secret)
        return challenge, result

    def fail_next(
        self,
        method: str,
        *,
        status: int = 429,
        retry_after: int | None = None,
        error: str | None = None,
        times: int = 1,
    ) -> None:
        """Make the next ``times`` calls of ``method`` fail.

        ``status=429`` answers ``ratelimited`` with a ``Retry-After`` header (default 1 s);
        ``status=200`` with ``error`` answers ``{"ok": false, "error": error}`` (e.g.
        ``missing_scope``); a 5xx answers a server error.
        """
        if status == 429 and retry_after is None:
            retry_after = 1
        default = {429: "ratelimited", 200: "internal_error"}.get(status, "fatal_error")
        self.inject(Fault(method=method, status=status, times=times, retry_after=retry_after,
                          detail={"error": error or default}))

    def messages_in(self, channel: str, thread_ts: str | None = None) -> list[JSONDict]:
        """Visible messages, oldest first: top-level ones, or one thread (parent + replies)."""
        msgs = sorted(self._messages.get(channel, {}).values(), key=lambda m: float(m["ts"]))
        if thread_ts is None:
            return [m for m in msgs if m.get("thread_ts", m["ts"]) == m["ts"]]
        return [m for m in msgs if m.get("thread_ts") == thread_ts or m["ts"] == thread_ts]

    def calls_to(self, method: str) -> list[SlackCall]:
        """Recorded calls of one Web API method."""
        return [c for c in self.calls if c.method == method]

    # ----------------------------------------------------------------- internals
    def _new_ts(self) -> str:
        # Slack ts values are unique per channel and strictly increasing; microsecond steps.
        now = max(time.time(), self._last_ts + 0.000001)
        self._last_ts = round(now, 6)
        return f"{self._last_ts:.6f}"

    def _store(self, channel: str, msg: JSONDict, thread_ts: str | None) -> None:
        msgs = self._messages.setdefault(channel, {})
        if thread_ts is not None:
            msg["thread_ts"] = thread_ts
        parent = msgs.get(thread_ts) if thread_ts is not None else None
        if parent is not None:
            msg["parent_user_id"] = parent.get("user")
            parent["thread_ts"] = thread_ts
            parent["reply_count"] = int(parent.get("reply_count", 0)) + 1
            users = parent.setdefault("reply_users", [])
            if msg.get("user") not in users:
                users.append(msg.get("user"))
            parent["reply_users_count"] = len(users)
            parent["latest_reply"] = msg["ts"]
        msgs[str(msg["ts"])] = msg
        self._wake()

    def _events_for(self, channel: str, msg: Mapping[str, Any]) -> list[JSONDict]:
        info = self._channels[channel]
        channel_type = "im" if info["is_im"] else "group" if info["is_group"] else "channel"
        base: JSONDict = {k: v for k, v in msg.items() if k not in ("reply_count", "reply_users")}
        base.update({"channel": channel, "event_ts": msg["ts"]})
        message_event = {**base, "type": "message", "channel_type": channel_type}
        mentioned = f"<@{self.bot_user_id}>" in str(msg.get("text", ""))
        if not mentioned or info["is_im"]:
            return [message_event]
        mention_event = {**base, "type": "app_mention"}
        mention_event.pop("parent_user_id", None)
        if self.double_delivery:
            return [message_event, mention_event]
        return [mention_event]

    def _event_callback(self, event: Mapping[str, Any], *, event_id: str | None) -> JSONDict:
        return {
            "token": "fake-verification-token",
            "team_id": self.team_id,
            "context_team_id": self.team_id,
            "api_app_id": self.app_id,
            "event": dict(event),
            "type": "event_callback",
            "event_id": event_id or f"Ev{next(self._event_ids):010d}",
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": self.team_id,
                    "user_id": self.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": f"4-{secrets.token_hex(8)}",
        }

    async def _deliver_all(self, events: list[JSONDict]) -> None:
        for event in events:
            await self.deliver_event(event)

    async def _send_envelope(self, envelope: JSONDict) -> None:
        envelope_id = str(envelope["envelope_id"])
        self.envelopes.setdefault(envelope_id, envelope)
        open_sockets = [ws for ws in self._sockets if not ws.closed]
        if not open_sockets:
            # Slack holds events briefly for an app with no connection; the next one gets them.
            if envelope_id not in self._undelivered:
                self._undelivered.append(envelope_id)
            self._wake()
            return
        ws = open_sockets[next(self._rr) % len(open_sockets)]
        try:
            await ws.send_json(envelope)
        except ConnectionError:
            self._undelivered.append(envelope_id)
        else:
            self.deliveries.append((envelope_id, int(envelope.get("retry_attempt", 0))))
            self._delivered_on[envelope_id] = ws
        self._wake()

    async def _signed_post(
        self,
        url: str,
        body: str,
        content_type: str,
        signing_secret: str,
        *,
        timestamp: int | None = None,
        bad_signature: bool = False,
        missing_headers: bool = False,
        extra_headers: Mapping[str, str] | None = None,
    ) -> SlackHttpResult:
        ts = str(int(time.time()) if timestamp is None else timestamp)
        signature = sign_slack_request(signing_secret, ts, body)
        if bad_signature:
            signature = signature[:-4] + ("0000" if not signature.endswith("0000") else "1111")
        headers = {"Content-Type": content_type, "User-Agent": "Slackbot 1.0 (+fake)"}
        if not missing_headers:
            headers["X-Slack-Request-Timestamp"] = ts
            headers["X-Slack-Signature"] = signature
        headers.update(extra_headers or {})
        session = await self._client_session()
        async with session.post(url, data=body.encode(), headers=headers) as resp:
            return SlackHttpResult(
                status=resp.status, body=await resp.text(), headers=dict(resp.headers)
            )

    async def _read_params(self, request: web.Request) -> JSONDict:
        params: JSONDict = dict(request.query)
        if request.content_type == "application/json":
            raw = await request.read()
            if raw:
                body = json.loads(raw)
                if isinstance(body, dict):
                    params.update(body)
        elif request.can_read_body:
            form = await request.post()
            params.update({k: v for k, v in form.items() if isinstance(v, str)})
        for key in ("blocks", "attachments", "metadata"):
            if isinstance(params.get(key), str):
                with contextlib.suppress(ValueError):
                    params[key] = json.loads(params[key])
        return params

    @route("web api", path="/api/{method}")
    async def _dispatch(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._read_params(request)
        auth = request.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else params.pop("token", None)
        params.pop("token", None)
        call = SlackCall(method=method, params=params, token=token)
        self.calls.append(call)
        try:
            self._check_token(method, token)
            if method == "chat.update" and (wait := self._over_update_budget()):
                self.limited += 1
                raise _SlackError("ratelimited", status=429, headers={"Retry-After": str(wait)})
            failure = self.take_fault(method)
            if failure is not None:
                headers = {}
                if failure.retry_after is not None:
                    headers["Retry-After"] = str(failure.retry_after)
                raise _SlackError(failure.detail["error"], status=failure.status,
                                  headers=headers)
            handler = self.handler_for(method)
            if handler is None:
                raise _SlackError("unknown_method")
            result = await handler(params)
        except _SlackError as exc:
            call.status, call.error = exc.status, exc.error
            self._wake()
            return web.json_response(
                {"ok": False, "error": exc.error}, status=exc.status, headers=exc.headers
            )
        self._wake()
        return web.json_response({"ok": True, **result})

    def _over_update_budget(self) -> int:
        """One ``chat.update`` of the workspace's budget; the seconds to wait when none is
        left (0: it goes)."""
        if self.update_limit <= 0:
            return 0
        rate = self.update_limit / self.update_period_s
        now = time.monotonic()
        tokens, at = self._update_tokens or (float(self.update_limit), now)
        tokens = min(float(self.update_limit), tokens + (now - at) * rate)
        if tokens < 1:
            self._update_tokens = (tokens, now)
            return max(1, math.ceil((1 - tokens) / rate))
        self._update_tokens = (tokens - 1, now)
        return 0

    def add_file(self, content: bytes, name: str, mimetype: str = "text/plain", *,
                 fid: str | None = None, title: str | None = None) -> JSONDict:
        """A file as a message's ``files`` entry carries it (served by ``files.info`` and
        its ``url_private``); put it in ``user_posts(extra={"files": [...]})``."""
        fid = fid or f"F{next(self._rr):08d}{uuid.uuid4().hex[:4].upper()}"
        url = f"http://127.0.0.1:{self._port}/files-pri/{fid}/{name}"
        info: JSONDict = {"id": fid, "name": name, "title": title or name, "mimetype": mimetype,
                          "filetype": name.rsplit(".", 1)[-1], "size": len(content),
                          "url_private": url, "url_private_download": url + "?download=1"}
        self._files[fid] = (info, content)
        return {k: v for k, v in info.items() if not k.startswith("url_")}

    def add_audio_clip(self, content: bytes, *, duration_ms: int, name: str = "audio_message.webm",
                       mimetype: str = "audio/webm", size: int | None = None) -> JSONDict:
        """An audio clip recorded in Slack (``subtype: slack_audio``, its length in
        ``duration_ms``) as a message's ``files`` entry carries it; ``size``: what the file
        object declares instead of the content's length (an oversized clip)."""
        info = self.add_file(content, name, mimetype)
        extra = {"subtype": "slack_audio", "duration_ms": duration_ms,
                 "media_display_type": "audio"}
        if size is not None:
            extra["size"] = size
        self._files[info["id"]][0].update(extra)
        return {**info, **extra}

    @route("files.info")
    async def _files_info(self, params: JSONDict) -> JSONDict:
        fid = str(params.get("file") or "")
        if fid not in self._files:
            raise _SlackError("file_not_found")
        return {"file": self._files[fid][0]}

    @route("url_private", verb="GET", path="/files-pri/{fid}/{name}")
    async def _file_download(self, request: web.Request) -> web.Response:
        fid = request.match_info["fid"]
        if request.headers.get("Authorization") != f"Bearer {self.bot_token}":
            return web.Response(status=302, headers={"Location": "/login"})  # Slack's answer
        self.downloads.append(fid)
        if fid not in self._files:
            return web.Response(status=404)
        return web.Response(body=self._files[fid][1])

    @route("files.getUploadURLExternal")
    async def _get_upload_url(self, params: JSONDict) -> JSONDict:
        filename = str(params.get("filename") or "")
        try:
            length = int(params.get("length") or 0)
        except ValueError:
            raise _SlackError("invalid_arguments") from None
        if not filename or length <= 0:
            raise _SlackError("invalid_arguments")
        if length > 1 << 30:
            raise _SlackError("file_too_large")
        fid = f"F{next(self._rr):08d}{uuid.uuid4().hex[:4].upper()}"
        self._staged[fid] = (filename, length, None)
        return {"upload_url": f"http://127.0.0.1:{self._port}/upload/v1/{fid}", "file_id": fid}

    @route("upload_url", verb="POST", path="/upload/v1/{fid}")
    async def _file_upload(self, request: web.Request) -> web.Response:
        fid = request.match_info["fid"]
        if fid not in self._staged:
            return web.Response(status=404, text="unknown upload")
        data = await request.read()
        filename, length, _ = self._staged[fid]
        self._staged[fid] = (filename, length, data)
        self._wake()
        return web.Response(status=200, text=f"OK - {len(data)}")

    @route("files.completeUploadExternal")
    async def _complete_upload(self, params: JSONDict) -> JSONDict:
        raw = params.get("files")
        try:
            items = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            raise _SlackError("invalid_arguments") from None
        if not isinstance(items, list) or not items:
            raise _SlackError("invalid_arguments")
        channel = self._channel(params, "channel_id") if params.get("channel_id") else None
        thread_ts = str(params["thread_ts"]) if params.get("thread_ts") else None
        comment = str(params["initial_comment"]) if params.get("initial_comment") else None
        done: list[JSONDict] = []
        shared: list[JSONDict] = []  # the files entries of the sharing message
        for item in items:
            fid = str(item.get("id") or "") if isinstance(item, dict) else ""
            staged = self._staged.get(fid)
            if staged is None:
                raise _SlackError("file_not_found")
            filename, length, data = staged
            if data is None or len(data) != length:
                raise _SlackError("file_upload_size_mismatch" if data else "file_not_found")
            title = str(item.get("title") or filename)
            del self._staged[fid]
            mime = mimetypes.guess_type(filename)[0] or "application/octet-stream"
            shared.append(self.add_file(data, filename, mime, fid=fid, title=title))
            done.append({"id": fid, "title": title})
        if channel is not None:
            msg: JSONDict = {
                "type": "message", "user": self.bot_user_id, "bot_id": self.bot_id,
                "app_id": self.app_id, "text": comment or "", "ts": self._new_ts(),
                "team": self.team_id, "upload": True,
                "files": shared,
            }
            self._store(channel, msg, thread_ts)
            for f in done:
                info, data = self._files[f["id"]]
                info.setdefault("shares", {}).setdefault("public", {}).setdefault(
                    channel, []).append({"ts": msg["ts"], "thread_ts": thread_ts})
                self.uploads.append(SlackUpload(
                    file_id=f["id"], filename=str(info["name"]), title=f["title"], data=data,
                    channel=channel, thread_ts=thread_ts, initial_comment=comment,
                    ts=msg["ts"]))
            self._wake()
        await self._held_upload()
        return {"files": done}

    def _check_token(self, method: str, token: str | None) -> None:
        if not token:
            raise _SlackError("not_authed")
        if token not in (self.bot_token, self.app_token):
            raise _SlackError("invalid_auth")
        app_level = method == "apps.connections.open"
        if app_level != (token == self.app_token):
            raise _SlackError("not_allowed_token_type")

    @route("socket mode", verb="GET", path="/socket-mode")
    async def _socket_mode(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid ticket")
        self._tickets.discard(ticket)  # a ticket opens one connection, like Slack's
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.append(ws)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": self.connected,
                "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
                "connection_info": {"app_id": self.app_id},
            }
        )
        self._wake()
        # Unacked envelopes go to the new connection: queued ones as they are, and ones sent on
        # a connection that has since closed as a retry (Slack's redelivery after a drop).
        # Envelopes in flight on another live connection are left alone.
        queued, self._undelivered = self._undelivered, []
        for envelope_id, envelope in list(self.envelopes.items()):
            if envelope_id in self.ack_payloads or envelope.get("type") == "interactive":
                continue  # acked, or an interaction: Slack never sends those again
            if envelope_id in queued:
                await self._send_envelope(envelope)
                continue
            previous = self._delivered_on.get(envelope_id)
            if previous is not None and previous.closed:
                attempt = max(a for e, a in self.deliveries if e == envelope_id)
                await self.redeliver(envelope_id, attempt + 1)
        try:
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                with contextlib.suppress(ValueError):
                    data = json.loads(msg.data)
                    if isinstance(data, dict) and "envelope_id" in data:
                        self.acks.append(str(data["envelope_id"]))
                        self.ack_payloads[str(data["envelope_id"])] = data.get("payload")
                        self._wake()
        finally:
            with contextlib.suppress(ValueError):
                self._sockets.remove(ws)
            self._wake()
        return ws

    def _channel(self, params: Mapping[str, Any], key: str = "channel") -> str:
        channel = str(params.get(key) or "")
        if channel not in self._channels:
            raise _SlackError("channel_not_found")
        return channel

    def _message(self, channel: str, ts: Any) -> JSONDict:
        msg = self._messages[channel].get(str(ts or ""))
        if msg is None:
            raise _SlackError("message_not_found")
        return msg

    @staticmethod
    def _content(params: Mapping[str, Any]) -> tuple[str, list[Any] | None]:
        text = str(params.get("text") or "")
        blocks = params.get("blocks")
        if blocks is not None and (not isinstance(blocks, list) or len(blocks) > _MAX_BLOCKS
                                   or not all(_block_ok(b) for b in blocks)):
            raise _SlackError("invalid_blocks")
        if not text and not blocks:
            raise _SlackError("no_text")
        if len(text) > _MAX_TEXT:
            raise _SlackError("msg_too_long")
        return text, blocks

    # ----------------------------------------------------------------- methods
    @route("auth.test")
    async def _auth_test(self, params: JSONDict) -> JSONDict:
        return {
            "url": "https://fake.slack.com/",
            "team": "Fake Workspace",
            "user": "geode",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    @route("chat.postMessage")
    async def _post_message(self, params: JSONDict) -> JSONDict:
        channel = self._channel(params)
        text, blocks = self._content(params)
        thread_ts = str(params["thread_ts"]) if params.get("thread_ts") else None
        msg: JSONDict = {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "app_id": self.app_id,
            "text": text,
            "ts": self._new_ts(),
            "team": self.team_id,
        }
        if blocks is not None:
            msg["blocks"] = blocks
        self._store(channel, msg, thread_ts)
        self.posts.append(
            SlackPost(
                method="chat.postMessage",
                channel=channel,
                ts=msg["ts"],
                text=text,
                thread_ts=thread_ts,
                blocks=blocks,
            )
        )
        if self.echo_bot_messages:
            # Delivered after this response, as Slack's event follows the API answer.
            events = self._events_for(channel, {**msg, "subtype": "bot_message"})
            task = asyncio.create_task(self._deliver_all(events))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return {"channel": channel, "ts": msg["ts"], "message": dict(msg)}

    @route("chat.update")
    async def _update(self, params: JSONDict) -> JSONDict:
        channel = self._channel(params)
        msg = self._message(channel, params.get("ts"))
        if msg.get("bot_id") != self.bot_id:
            raise _SlackError("cant_update_message")
        text, blocks = self._content(params)
        msg["text"] = text
        if blocks is not None:
            msg["blocks"] = blocks
        # an update ends a stream (the SDK's fallback for a stream Slack expired)
        msg.pop("streaming", None)
        msg["edited"] = {"user": self.bot_user_id, "ts": self._new_ts()}
        self.posts.append(
            SlackPost(
                method="chat.update",
                channel=channel,
                ts=msg["ts"],
                text=text,
                thread_ts=msg.get("thread_ts") if msg.get("thread_ts") != msg["ts"] else None,
                blocks=blocks,
            )
        )
        return {"channel": channel, "ts": msg["ts"], "text": text, "message": dict(msg)}

    @route("chat.startStream")
    async def _start_stream(self, params: JSONDict) -> JSONDict:
        """A message that grows as it is written (Slack's chat streaming): posted in the
        thread with ``markdown_text`` so far, then :meth:`_append_stream` /
        :meth:`_stop_stream`; each call is a :class:`SlackPost` too."""
        if not self.chat_streaming:
            raise _SlackError("unknown_method")
        channel = self._channel(params)
        if not params.get("thread_ts"):
            raise _SlackError("invalid_arguments")
        thread_ts = str(params["thread_ts"])
        text = _stream_text(params)
        msg: JSONDict = {"type": "message", "user": self.bot_user_id, "bot_id": self.bot_id,
                         "app_id": self.app_id, "text": text, "ts": self._new_ts(),
                         "team": self.team_id, "streaming": True}
        self._store(channel, msg, thread_ts)
        self.posts.append(SlackPost(method="chat.startStream", channel=channel, ts=msg["ts"],
                                    text=text, thread_ts=thread_ts))
        return {"channel": channel, "ts": msg["ts"]}

    def _streaming(self, params: JSONDict) -> tuple[str, JSONDict]:
        if not self.chat_streaming:
            raise _SlackError("unknown_method")
        channel = self._channel(params)
        msg = self._message(channel, params.get("ts"))
        if msg.get("bot_id") != self.bot_id:
            raise _SlackError("cant_update_message")
        if not msg.get("streaming"):
            raise _SlackError("message_not_in_streaming_state")
        return channel, msg

    @route("chat.appendStream")
    async def _append_stream(self, params: JSONDict) -> JSONDict:
        channel, msg = self._streaming(params)
        msg["text"] += _stream_text(params)
        self.posts.append(SlackPost(method="chat.appendStream", channel=channel, ts=msg["ts"],
                                    text=msg["text"], thread_ts=msg.get("thread_ts")))
        return {"channel": channel, "ts": msg["ts"]}

    @route("chat.stopStream")
    async def _stop_stream(self, params: JSONDict) -> JSONDict:
        channel, msg = self._streaming(params)
        msg["text"] += _stream_text(params)
        msg["streaming"] = False
        self.posts.append(SlackPost(method="chat.stopStream", channel=channel, ts=msg["ts"],
                                    text=msg["text"], thread_ts=msg.get("thread_ts")))
        return {"channel": channel, "ts": msg["ts"], "message": dict(msg)}

    @route("chat.postEphemeral")
    async def _post_ephemeral(self, params: JSONDict) -> JSONDict:
        channel = self._channel(params)
        user = str(params.get("user") or "")
        if user not in self._users:
            raise _SlackError("user_not_found")
        text, _ = self._content(params)
        self.ephemerals.append({"channel": channel, "user": user, "text": text,
                                "thread_ts": str(params["thread_ts"])
                                if params.get("thread_ts") else None})
        return {"message_ts": self._new_ts()}

    @route("chat.delete")
    async def _delete(self, params: JSONDict) -> JSONDict:
        channel = self._channel(params)
        msg = self._message(channel, params.get("ts"))
        if msg.get("bot_id") != self.bot_id:
            raise _SlackError("cant_delete_message")
        del self._messages[channel][msg["ts"]]
        self.posts.append(
            SlackPost(
                method="chat.delete",
                channel=channel,
                ts=msg["ts"],
                text=msg["text"],
                thread_ts=msg.get("thread_ts"),
            )
        )
        return {"channel": channel, "ts": msg["ts"]}

    @route("reactions.add")
    async def _reactions_add(self, params: JSONDict) -> JSONDict:
        channel = self._channel(params)
        msg = self._message(channel, params.get("timestamp"))
        name = str(params.get("name") or "")
        if not name:
            raise _SlackError("invalid_name")
        reactions: list[JSONDict] = msg.setdefault("reactions", [])
        entry = next((r for r in reactions if r["name"] == name), None)
        if entry is not None and self.bot_user_id in entry["users"]:
            raise _SlackError("already_reacted")
        if entry is None:
            entry = {"name": name, "users": [], "count": 0}
            reactions.append(entry)
        entry["users"].append(self.bot_user_id)
        entry["count"] += 1
        self.reactions.append({"channel": channel, "ts": msg["ts"], "name": name})
        return {}

    @route("reactions.remove")
    async def _reactions_remove(self, params: JSONDict) -> JSONDict:
        channel = self._channel(params)
        msg = self._message(channel, params.get("timestamp"))
        name = str(params.get("name") or "")
        for entry in msg.get("reactions", []):
            if entry["name"] == name and self.bot_user_id in entry["users"]:
                entry["users"].remove(self.bot_user_id)
                entry["count"] -= 1
                msg["reactions"] = [r for r in msg["reactions"] if r["count"] > 0]
                return {}
        raise _SlackError("no_reaction")

    @staticmethod
    def _page(msgs: list[JSONDict], params: Mapping[str, Any], *, newest_first: bool) -> JSONDict:
        oldest = float(params.get("oldest") or 0)
        latest = float(params["latest"]) if params.get("latest") else float("inf")
        inclusive = str(params.get("inclusive", "")).lower() in ("1", "true")

        def inside(m: JSONDict) -> bool:
            ts = float(m["ts"])
            if inclusive:
                return oldest <= ts <= latest
            return oldest < ts < latest

        selected = sorted((m for m in msgs if inside(m)), key=lambda m: float(m["ts"]))
        if newest_first:
            selected.reverse()
        start = int(str(params.get("cursor") or "0").removeprefix("page:") or 0)
        limit = max(1, min(1000, int(params.get("limit") or 100)))
        page = selected[start : start + limit]
        more = start + limit < len(selected)
        return {
            "messages": [dict(m) for m in page],
            "has_more": more,
            "response_metadata": {"next_cursor": f"page:{start + limit}" if more else ""},
        }

    @route("conversations.history")
    async def _history(self, params: JSONDict) -> JSONDict:
        channel = self._channel(params)
        top = [
            m
            for m in self._messages[channel].values()
            if m.get("thread_ts", m["ts"]) == m["ts"] or m.get("subtype") == "thread_broadcast"
        ]
        return {**self._page(top, params, newest_first=True), "pin_count": 0}

    @route("conversations.replies")
    async def _replies(self, params: JSONDict) -> JSONDict:
        channel = self._channel(params)
        msg = self._messages[channel].get(str(params.get("ts") or ""))
        if msg is None:
            raise _SlackError("thread_not_found")
        root = str(msg.get("thread_ts", msg["ts"]))
        thread = [
            m
            for m in self._messages[channel].values()
            if m["ts"] == root or m.get("thread_ts") == root
        ]
        page = self._page(thread, params, newest_first=False)
        parent = self._messages[channel].get(root)
        # Slack always leads a replies page with the parent, whatever the ts window says.
        if parent is not None and all(m["ts"] != root for m in page["messages"]):
            page["messages"].insert(0, dict(parent))
        return page

    @route("conversations.info")
    async def _conversation_info(self, params: JSONDict) -> JSONDict:
        return {"channel": dict(self._channels[self._channel(params)])}

    @route("users.info")
    async def _users_info(self, params: JSONDict) -> JSONDict:
        user = self._users.get(str(params.get("user") or ""))
        if user is None:
            raise _SlackError("user_not_found")
        return {"user": dict(user)}

    @route("assistant.threads.setStatus")
    async def _set_status(self, params: JSONDict) -> JSONDict:
        channel = self._channel(params, "channel_id")
        if not params.get("thread_ts"):
            raise _SlackError("invalid_arguments")
        self.statuses.append(
            {
                "channel_id": channel,
                "thread_ts": str(params["thread_ts"]),
                "status": str(params.get("status") or ""),
            }
        )
        return {}

    @route("apps.connections.open")
    async def _connections_open(self, params: JSONDict) -> JSONDict:
        ticket = uuid.uuid4().hex
        self._tickets.add(ticket)
        self.connections_opened += 1
        url = f"ws://127.0.0.1:{self._port}/socket-mode?ticket={ticket}&app_id={self.app_id}"
        return {"url": url}
