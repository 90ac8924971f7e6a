"""The Slack connector, on slack-bolt (async) and slack_sdk.

Intake (both feed the same bolt app, whose one global middleware records the event):

* **Socket Mode** when an app-level token is configured: bolt's ``AsyncSocketModeHandler``.
  The envelope is acknowledged only after the bolt app answered 200, i.e. after the event
  was committed; a failure answers 500 and bolt sends no ack, so Slack redelivers.
* **HTTP Events API** otherwise: an aiohttp endpoint (``/slack/events``) hands the request to
  bolt, whose ``RequestVerification`` middleware checks the v0 signature (5-minute timestamp
  window, constant-time compare; 401 otherwise) and answers ``url_verification``. The 200
  goes out after the record (``process_before_response``), a failure answers 500.

Interactivity (the approval buttons, ``bots.slack._actions``) takes the same two paths: an
``interactive`` envelope over Socket Mode, or the signed ``payload=<json>`` form POST Slack
sends to the Request URL (the same endpoint and the same signature check as events). A click
is recorded before its ack, like an event, as the clicker's ``/approve ID`` / ``/deny ID``
(Slack never retries an interaction: a failed record shows the clicker an error instead).

The connector is three parts: :mod:`bots.slack.inbound` (conversion and intake: the bolt
middleware, the HTTP endpoint, commands, clicks, catch-up), :mod:`bots.slack.client` (send /
edit / react / upload / typing and the optional abilities) and this module's glue (tokens,
connect / disconnect, the intake lease). The renderer is :mod:`bots.slack._mrkdwn`.

Every replica takes, records and processes events (each thread on the replica holding its
thread lease, see ``bots.store.leases``); catch-up runs only on the holder of the store lease
``slack:<team>:<bot>``. Catch-up after downtime
reads ``conversations.history`` and, for engaged threads and threads with new replies,
``conversations.replies`` from the channel's persisted cursor.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Literal

import structlog
from aiohttp import ClientError, ClientSession, web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from bots._aio import reap
from bots.connector import PlatformUnreachableError
from bots.format import Chunk
from bots.port import TurnHost
from bots.slack._history import SlackHistory
from bots.slack._mrkdwn import SLACK_LIMIT, chunk_mrkdwn, render_progress
from bots.slack.client import SLACK_FILE_HOSTS, UPLOAD_LIMIT, CallBudget, SlackClient
from bots.slack.inbound import SLACK_HELP, SlackInbound, _RecordFirst, _SocketHandler
from bots.slack.options import SlackOptions
from geode.errors import ConfigError
from geode.settings import BindingSettings

__all__ = ["EVENTS", "SCOPES", "SLACK_FILE_HOSTS", "SLACK_HELP", "UPLOAD_LIMIT",
           "SlackConnector", "SlackOptions"]

log = structlog.get_logger(__name__)

#: auth.test / apps.connections.open answers that mean a wrong token (configuration, not an
#: outage): ``geode serve`` exits 2 at start
_AUTH_ERRORS = {"invalid_auth", "not_authed", "account_inactive", "token_revoked",
                "token_expired", "not_allowed_token_type", "missing_scope", "no_permission",
                "team_access_not_granted", "ekm_access_denied"}
#: what deploy/slack-manifest.yaml must grant: the bot scopes and events this module uses
SCOPES = frozenset({
    "chat:write",          # chat.postMessage / .update / .delete / .postEphemeral, chat
                           # streaming (chat.startStream / .appendStream / .stopStream)
    "reactions:write",     # reactions.add / reactions.remove
    "channels:history",    # conversations.history / .replies, message.channels
    "groups:history",      # the same for private channels, message.groups
    "im:history",          # the same for DMs, message.im
    "app_mentions:read",   # app_mention
    "commands",            # /geode
    "assistant:write",     # assistant.threads.setStatus (optional: falls back)
    "files:read",          # files.info and url_private (attachments in)
    "files:write",         # files.getUploadURLExternal / .completeUploadExternal (files out)
})
EVENTS = frozenset({"app_mention", "message.channels", "message.groups", "message.im"})


class SlackConnector(SlackClient, SlackInbound):
    """Slack via slack-bolt / slack_sdk. See the module docstring.

    Args:
        host: the daemon.
        bot_token: the ``xoxb-`` bot token.
        app_token: the ``xapp-`` app-level token (``connections:write``): Socket Mode.
        signing_secret: the app's signing secret (HTTP Events API mode).
        bindings: configured bindings (non-Slack ones are dropped).
        options: ``[channels.slack]``.
        fault: test seam, called at named points of the pipeline.
    """

    platform = "slack"
    text_limit = SLACK_LIMIT

    def __init__(
        self,
        *,
        host: TurnHost,
        bot_token: str,
        app_token: str | None = None,
        signing_secret: str | None = None,
        bindings: Sequence[BindingSettings] = (),
        options: SlackOptions | None = None,
        fault: Callable[[str], None] | None = None,
    ) -> None:
        opts = options or SlackOptions()
        super().__init__(host=host, bindings=bindings, options=opts, fault=fault)
        self.opts = opts
        self.bot_token = bot_token
        self.app_token = app_token
        self.signing_secret = signing_secret
        self.mode: Literal["socket", "http"] = (
            "socket" if app_token and opts.mode != "http" else "http")
        if opts.mode == "socket" and not app_token:
            raise ConfigError(f"[channels.slack] mode = \"socket\" needs an app-level token in "
                              f"${opts.app_token_env} (xapp-…, scope connections:write).")
        if self.mode == "http" and not signing_secret:
            raise ConfigError(
                f"Slack needs ${opts.app_token_env} (Socket Mode) or ${opts.signing_secret_env} "
                "(HTTP Events API): set one from the app's Basic Information page.")
        self.client: AsyncWebClient | None = None
        self._http: ClientSession | None = None
        self.app: AsyncApp | None = None
        self.socket: AsyncSocketModeHandler | None = None
        self.team_id = ""
        self.bot_uid = ""
        self.bot_id = ""
        self.http_port = 0
        self._web: web.AppRunner | None = None
        self._main: asyncio.Task[None] | None = None
        #: per channel, where catch-up starts (cursors as they were before the intake ran)
        self.catch_up_from: dict[str, str] = {}
        self.history = SlackHistory(connector=self)
        self._cursor_seen: dict[str, float] = {}
        self._recorded: OrderedDict[str, None] = OrderedDict()
        self._recording: dict[str, tuple[asyncio.Future[bool], tuple[str, str] | None]] = {}
        self._no_status: set[str] = set()
        self._status_on: set[tuple[str, str]] = set()
        self._no_stream: set[str] = set()
        self._streams: OrderedDict[str, None] = OrderedDict()
        self._stream_starts = CallBudget(opts.stream_starts_per_min)
        self._stream_appends = CallBudget(opts.stream_appends_per_min)
        self._updates = CallBudget(opts.updates_per_min)

    # -- identity -------------------------------------------------------------------------------

    def bot_user_id(self) -> str | None:
        return self.bot_uid or None

    def bot_username(self) -> str | None:
        return None  # Slack commands are slash commands, never "/cmd@bot" text

    def render(self, markdown: str) -> list[Chunk]:
        return chunk_mrkdwn(markdown, limit=self.opts.chunk_limit)

    def render_progress(self, text: str) -> Chunk:
        return render_progress(text)

    # -- lifecycle ------------------------------------------------------------------------------

    async def connect(self) -> None:
        o = self.opts
        # One pooled HTTP session for every Web API call (slack_sdk opens one per call
        # otherwise: a TCP + TLS handshake per chat.update).
        self._http = ClientSession()
        self.client = AsyncWebClient(
            token=self.bot_token, base_url=o.base_url, session=self._http,
            retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=o.rate_limit_retries)],
        )
        try:
            await self._connect_attempt()
        except BaseException as exc:
            # nothing of this attempt stays open; the next one builds its own
            await self._close_attempt()
            if isinstance(exc, SlackApiError) and exc.response.get("error") in _AUTH_ERRORS:
                raise ConfigError(
                    f"Slack rejected a token ({exc.response.get('error')}): the bot token in "
                    f"${o.bot_token_env} (xoxb-…, OAuth & Permissions) or the app-level token "
                    f"in ${o.app_token_env} (xapp-…, Basic Information). Copy it again.") from exc
            if isinstance(exc, SlackClientError | ClientError | TimeoutError | OSError):
                raise PlatformUnreachableError(
                    f"cannot reach the Slack API at {o.base_url} ({exc}). Check the network, "
                    "or [channels.slack] base_url.") from exc
            raise
        self._main = self.start_supervisor(lease_name=f"slack:{self.team_id}:{self.bot_id}",
                                           ttl_s=o.lease_ttl_s)

    async def _connect_attempt(self) -> None:
        assert self.client is not None
        o = self.opts
        auth = await self.client.auth_test()
        self.team_id = str(auth.get("team_id") or "")
        self.bot_uid = str(auth.get("user_id") or "")
        self.bot_id = str(auth.get("bot_id") or "")
        self.workspace = self.team_id
        assert self.layer is not None
        # Where catch-up starts, read before the intake can move any cursor.
        await self.intake.refresh_bindings()
        for b in self.bound_channels():
            saved = await self.intake.cursors.get(self.cursor_name(b.channel))
            if saved is not None:
                self.catch_up_from[b.channel] = saved
        self.app = AsyncApp(
            client=self.client, signing_secret=self.signing_secret or "",
            process_before_response=True,  # the ack / 200 waits for the record
            request_verification_enabled=self.mode == "http",
            logger=logging.getLogger("bots.slack.bolt"),
        )
        self.app.use(_RecordFirst(self))
        if self.mode == "socket":
            assert self.app_token is not None
            self.socket = _SocketHandler(self.app, connector=self, app_token=self.app_token,
                                         web_client=self.client,
                                         ping_interval=o.ping_interval_s)
            await self.socket.connect_async()  # type: ignore[no-untyped-call]
        else:
            await self._start_http()

    async def _close_attempt(self) -> None:
        if self.socket is not None:
            with contextlib.suppress(Exception):
                await self.socket.close_async()  # type: ignore[no-untyped-call]
            self.socket = None
        if self._web is not None:
            with contextlib.suppress(Exception):
                await self._web.cleanup()
            self._web = None
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def disconnect(self) -> None:
        await reap(self._main)
        self._main = None
        if self.socket is not None:
            with contextlib.suppress(Exception):
                await self.socket.close_async()  # type: ignore[no-untyped-call]
            self.socket = None
        if self._web is not None:
            await self._web.cleanup()
            self._web = None
        await self.release_processing()
        if self._http is not None:
            await self._http.close()
            self._http = None
