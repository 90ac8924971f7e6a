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

Redeliveries (``X-Slack-Retry-Num``, ``retry_attempt``, a replayed envelope) and the
``message`` + ``app_mention`` pair of one post map to one dedupe key (channel + ts), so the
store keeps one row and the layer answers once.

Every replica takes, records and processes events (each thread on the replica holding its
thread lease, see ``bots.store.leases``); catch-up runs only on the holder of the store lease
``slack:<team>:<bot>``. Catch-up after downtime
reads ``conversations.history`` and, for engaged threads and threads with new replies,
``conversations.replies`` from the channel's persisted cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import structlog
from aiohttp import ClientError, ClientSession, web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app, send_async_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.web.async_client import AsyncWebClient

from bots._aio import reap
from bots._download import TOO_LARGE, check_url, stream_to_file
from bots.connector import BaseConnector, PlatformUnreachableError
from bots.events import Attachment, InboundEvent, ReplyTarget
from bots.format import Chunk
from bots.port import AttachmentRefused, DeliveryError, TurnHost
from bots.progress import WORKING
from bots.slack._actions import (
    APPROVE_ACTION,
    approval_blocks,
    convert_action,
    is_block_actions,
)
from bots.slack._convert import (
    COMMAND_NAMES,
    SlashCommand,
    command_event,
    convert_message,
    event_marker,
    parse_slash,
    valid_ts,
)
from bots.slack._history import SlackHistory
from bots.slack._mrkdwn import SLACK_LIMIT, chunk_mrkdwn, render_progress
from bots.slack.options import SlackOptions
from geode.errors import ConfigError
from geode.settings import BindingSettings

#: where Slack serves ``url_private`` (commercial and GovSlack); nothing else gets the token
SLACK_FILE_HOSTS = ("https://files.slack.com", "https://slack-files.com",
                    "https://files.slack-gov.com")

__all__ = ["EVENTS", "SCOPES", "SLACK_HELP", "SlackConnector", "SlackOptions"]

log = structlog.get_logger(__name__)

#: how many recorded dedupe keys the intake remembers (a duplicate comes right after)
_RECORDED_KEYS = 1024

#: emoji the layer asks for -> Slack reaction names
_REACTION_NAMES = {"👀": "eyes", "✅": "white_check_mark", "⏳": "hourglass_flowing_sand",
                   "⚠️": "warning", "⏹": "black_square_for_stop"}
#: assistant.threads.setStatus answers meaning "not available here": fall back for the channel
_STATUS_UNAVAILABLE = {"missing_scope", "not_allowed_token_type", "invalid_arguments",
                       "channel_not_found", "not_allowed", "unknown_method", "no_permission",
                       "method_not_supported_for_channel_type", "feature_not_enabled",
                       "thread_not_found", "invalid_thread_ts"}
#: auth.test / apps.connections.open answers that mean a wrong token (configuration, not an
#: outage): ``geode serve`` exits 2 at start
_AUTH_ERRORS = {"invalid_auth", "not_authed", "account_inactive", "token_revoked",
                "token_expired", "not_allowed_token_type", "missing_scope", "no_permission",
                "team_access_not_granted", "ekm_access_denied"}
_FATAL = {"channel_not_found", "not_in_channel", "is_archived", "invalid_auth", "not_authed",
          "account_inactive", "token_revoked", "missing_scope", "restricted_action",
          "cant_update_message", "msg_too_long", "no_text", "invalid_blocks",
          "not_allowed_token_type", "ekm_access_denied", "team_access_not_granted"}

#: what deploy/slack-manifest.yaml must grant: the bot scopes and events this module uses
SCOPES = frozenset({
    "chat:write",          # chat.postMessage, chat.update, chat.postEphemeral
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
#: files_upload_v2's limit (Slack's: 1 GB a file)
UPLOAD_LIMIT = 1 << 30
EVENTS = frozenset({"app_mention", "message.channels", "message.groups", "message.im"})

SLACK_HELP = (
    "Mention me in a bound channel and I answer in a thread on your message; replies in that "
    "thread need no mention.\n"
    "`/geode status [thread]`  session, model, running turn, last result\n"
    "`/geode stop [thread]`    stop the running turn\n"
    "`/geode new [thread]`     start a new session in the thread (the old one is its parent)\n"
    "`/geode reset [thread]`   same as new\n"
    "`/geode approve [ID] [thread]`  approve a waiting approval request (its id, or the one "
    "waiting in the channel); the same as its Approve button\n"
    "`/geode deny [ID] [thread]`     deny it\n"
    "`/geode help`             this text\n"
    "[thread] is a thread's message link or ts; without it the command acts on the "
    "channel's thread with the running (else latest) turn."
)



class _RecordFirst(AsyncMiddleware):
    """The bolt app's one global middleware: record, then let bolt acknowledge (200)."""

    def __init__(self, connector: SlackConnector) -> None:
        self.connector = connector

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Callable[[], Any]
    ) -> BoltResponse:
        body = req.body
        if isinstance(body, dict) and body.get("type") == "event_callback":
            await self.connector.intake_event(body)  # raises -> 500 -> no ack: redelivered
            return BoltResponse(status=200, body="")
        if isinstance(body, dict) and "command" in body and "trigger_id" in body:
            text = await self.connector.intake_command(body)
            payload = {"response_type": "ephemeral", "text": text}
            return BoltResponse(status=200, body=json.dumps(payload),
                                headers={"content-type": "application/json"})
        if is_block_actions(body):  # a button click (approvals): recorded, then acked
            # raises -> 500 / no ack: the clicker sees an error and may click again (Slack
            # never retries an interaction; the request keeps its buttons)
            await self.connector.intake_action(body)
            return BoltResponse(status=200, body="")
        return BoltResponse(status=200, body="")  # other interactivity: not used, acknowledged


class _SocketHandler(AsyncSocketModeHandler):
    """bolt's handler, plus: an envelope bolt cannot even parse is recorded as a marker and
    acknowledged, instead of staying unacked forever (Slack would redeliver the poison)."""

    def __init__(self, app: AsyncApp, *, connector: SlackConnector, **kw: Any) -> None:
        super().__init__(app, **kw)
        self.connector = connector

    async def handle(
        self, client: AsyncBaseSocketModeClient, req: SocketModeRequest
    ) -> None:
        start = time.time()
        try:
            bolt_resp = await run_async_bolt_app(self.app, req)
        except Exception:
            # Bolt raised while building its request (a malformed payload); its dispatch
            # turns our own failures into 500 instead, so this is never a failed record.
            log.warning("slack.unparseable_envelope", envelope=req.envelope_id, exc_info=True)
            body = req.payload if isinstance(req.payload, dict) else {}
            await self.connector.intake_event(body)  # raises -> no ack -> redelivered
            bolt_resp = BoltResponse(status=200, body="")
        await send_async_response(client, req, bolt_resp, start)


class SlackConnector(BaseConnector):
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
        #: dedupe keys this process recorded (committed) lately, oldest first: Slack sends
        #: a mention twice (``message`` and ``app_mention``, one key), and the second needs
        #: no write transaction to be found a duplicate
        self._recorded: OrderedDict[str, None] = OrderedDict()
        #: the records under way (the two deliveries come at once): key -> (done, cursor)
        self._recording: dict[str, tuple[asyncio.Future[bool], tuple[str, str] | None]] = {}
        self._no_status: set[str] = set()
        self._status_on: set[tuple[str, str]] = set()

    # -- identity -------------------------------------------------------------------------------

    def bot_user_id(self) -> str | None:
        return self.bot_uid or None

    def bot_username(self) -> str | None:
        return None  # Slack commands are slash commands, never "/cmd@bot" text

    def render(self, markdown: str) -> list[Chunk]:
        return chunk_mrkdwn(markdown, limit=self.opts.chunk_limit)

    def render_progress(self, text: str) -> Chunk:
        return render_progress(text)

    def cursor_name(self, channel: str) -> str:
        return f"slack:{self.team_id}:{channel}:ts"

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

    async def _start_http(self) -> None:
        o = self.opts
        app = web.Application()
        app.router.add_post(o.http_path, self._on_http)
        self._web = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._web.setup()
        site = web.TCPSite(self._web, o.http_host, o.http_port)
        await site.start()
        self.http_port = int(self._web.addresses[0][1]) if o.http_port == 0 else o.http_port

    @property
    def events_url(self) -> str:
        return f"http://{self.opts.http_host}:{self.http_port}{self.opts.http_path}"

    async def _on_http(self, request: web.Request) -> web.Response:
        assert self.app is not None
        try:
            bolt_req = await to_bolt_request(request)
        except Exception:  # unparseable before its signature could be checked: not recorded
            log.warning("slack.http_unparseable", remote=request.remote)
            return web.Response(status=400, text="malformed request")
        bolt_resp = await self.app.async_dispatch(bolt_req)
        if bolt_resp.status == 401:
            log.warning("slack.http_bad_signature", remote=request.remote)
        return await to_aiohttp_response(bolt_resp)

    # -- intake ---------------------------------------------------------------------------------

    def bound_channels(self) -> list[BindingSettings]:
        """The Slack bindings of this workspace (configured and stored)."""
        assert self.layer is not None
        return [b for b in self.intake.bound_channels("slack")
                if not b.team or b.team == self.team_id]

    def convert(self, event: Any, channel: str | None = None) -> InboundEvent | None:
        """A message payload as an event of this workspace, or None (never raises)."""
        try:
            return convert_message(event, team=self.team_id, bot_user_id=self.bot_uid,
                                   bot_id=self.bot_id, channel=channel)
        except Exception:  # a converter bug must not stop the intake
            log.warning("slack.convert_failed", exc_info=True)
            return None

    async def intake_event(self, body: dict[str, Any]) -> None:
        """Record one Events API callback (called before it is acknowledged)."""
        assert self.layer is not None
        ev = self.convert(body.get("event"))
        if ev is None:
            marker = event_marker(body, team=self.team_id)
            if marker.dedupe_key:
                await self.submit([(marker, "ignored")])
            return
        cursor = None
        if not ev.is_edit and await self.intake.binding_for("slack", ev.workspace,
                                                               ev.channel) is not None:
            # A live message moves its channel's catch-up cursor forward (never back).
            ts = float(ev.message_id)
            if ts > self._cursor_seen.get(ev.channel, 0.0):
                cursor = (self.cursor_name(ev.channel), ev.message_id)
        key = ev.dedupe_key
        if cursor is None and key in self._recorded:
            return  # recorded already (the store would skip it): acknowledged as it is
        under_way = self._recording.get(key)
        if under_way is not None and cursor in (None, under_way[1]):
            if await asyncio.shield(under_way[0]):
                return  # the other delivery recorded it (and this cursor)
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._recording.setdefault(key, (done, cursor))
        recorded = False
        try:
            await self.submit([(ev, "received")], cursor=cursor)
            recorded = True
        finally:
            if not done.done():
                done.set_result(recorded)
            entry = self._recording.get(key)
            if entry is not None and entry[0] is done:
                del self._recording[key]
        self._recorded[key] = None
        if len(self._recorded) > _RECORDED_KEYS:
            self._recorded.popitem(last=False)
        if cursor is not None:
            self._cursor_seen[ev.channel] = max(self._cursor_seen.get(ev.channel, 0.0),
                                                float(ev.message_id))

    async def intake_command(self, body: dict[str, Any]) -> str:
        """Record a ``/geode`` command as a command message in its thread; the ack's text."""
        cmd = parse_slash(body)
        if cmd is None:
            return SLACK_HELP
        if cmd.name not in COMMAND_NAMES:
            return f"Unknown subcommand `{cmd.name}`.\n\n{SLACK_HELP}"
        thread = cmd.thread or await self._thread_for(cmd)
        if thread is None:
            if cmd.name == "help":
                return SLACK_HELP
            return ("There is no GEODE thread in this channel yet: mention me to start one, or "
                    f"give a thread's message link: `{self.opts.command} {cmd.name} <link>`.")
        await self.submit([(command_event(cmd, team=self.team_id, thread_root=thread),
                            "received")])
        return f"`{self.opts.command} {cmd.name}`: answering in the thread."

    async def intake_action(self, body: dict[str, Any]) -> None:
        """Record a click on an approval button (``bots.slack._actions``) before it is
        acknowledged; any other interactive payload is acknowledged unrecorded."""
        try:
            ev = convert_action(body, team=self.team_id)
        except Exception:  # a converter bug must not stop the intake
            log.warning("slack.convert_action_failed", exc_info=True)
            ev = None
        if ev is None:
            log.info("slack.action_ignored")
            return
        await self.submit([(ev, "received")])

    async def _thread_for(self, cmd: SlashCommand) -> str | None:
        """The thread with the newest running turn in the channel, else the newest thread."""
        assert self.layer is not None
        return await self.intake.latest_thread("slack", self.team_id, cmd.channel)

    # -- catch-up (bots.slack._history) -----------------------------------------------------

    async def catch_up(self) -> None:
        """Record what bound channels got while nobody listened (history from the cursor)."""
        await self.history.catch_up()

    async def fetch_thread_history(self, event: InboundEvent) -> list[InboundEvent]:
        """Earlier messages of a thread the bot joins mid-way (not recorded ones)."""
        return await self.history.fetch_thread_history(event)

    # -- sending --------------------------------------------------------------------------------

    async def send(self, target: ReplyTarget, chunk: Chunk, *, plain: bool = False) -> str:
        assert self.client is not None
        text = chunk.fallback if plain else chunk.formatted
        try:
            resp = await self.client.chat_postMessage(
                channel=target.channel, text=text, mrkdwn=not plain,
                thread_ts=target.thread_root if valid_ts(target.thread_root) else None,
                unfurl_links=False, unfurl_media=False,
            )
        except (SlackApiError, SlackClientError, ClientError, TimeoutError) as exc:
            raise _map_error(exc, sending=True) from exc
        await self._clear_status_if_final(target, text)
        return str(resp["ts"])

    async def edit(
        self, target: ReplyTarget, message_id: str, chunk: Chunk, *, plain: bool = False
    ) -> None:
        assert self.client is not None
        text = chunk.fallback if plain else chunk.formatted
        try:
            # blocks=[]: Slack keeps a message's blocks through an update that names none;
            # an edit replaces the whole message (an approval request loses its buttons)
            await self.client.chat_update(channel=target.channel, ts=message_id, text=text,
                                          blocks=[])
        except (SlackApiError, SlackClientError, ClientError, TimeoutError) as exc:
            raise _map_error(exc, sending=False) from exc
        await self._clear_status_if_final(target, text)

    async def send_approval(self, target: ReplyTarget, chunk: Chunk, *, short_id: str) -> str:
        """The request as Block Kit: its text, then Approve / Deny buttons whose clicks come
        back as ``block_actions`` (:meth:`intake_action`), answered by :meth:`answer_action`."""
        assert self.client is not None
        try:
            resp = await self.client.chat_postMessage(
                channel=target.channel, text=chunk.fallback,
                blocks=approval_blocks(chunk.formatted, short_id),
                thread_ts=target.thread_root if valid_ts(target.thread_root) else None,
                unfurl_links=False, unfurl_media=False,
            )
        except (SlackApiError, SlackClientError, ClientError, TimeoutError) as exc:
            raise _map_error(exc, sending=True) from exc
        return str(resp["ts"])

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        """``chat.postEphemeral``: only the user who clicked sees ``text``, in the thread."""
        assert self.client is not None
        try:
            await self.client.chat_postEphemeral(
                channel=event.channel, user=event.sender, text=text[:3000],
                thread_ts=event.thread_root if valid_ts(event.thread_root) else None,
            )
        except (SlackApiError, SlackClientError, ClientError, TimeoutError) as exc:
            raise _map_error(exc, sending=False) from exc

    async def download(self, attachment: Attachment, dest: Path, *, max_bytes: int) -> int:
        """``files.info``, then its ``url_private_download`` with the bot token (Slack's
        private file URLs answer only with the token)."""
        assert self.client is not None
        try:
            resp = await self.client.files_info(file=attachment.ref)
        except (SlackApiError, SlackClientError, ClientError, TimeoutError) as exc:
            raise _map_error(exc, sending=False) from exc
        info = resp.get("file")
        if not isinstance(info, dict):
            raise AttachmentRefused("Slack did not give the file")
        size = info.get("size")
        if isinstance(size, int) and size > max_bytes:
            raise AttachmentRefused(TOO_LARGE)
        url = info.get("url_private_download") or info.get("url_private")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise AttachmentRefused("it has no download address (an external file?)")
        # the bot token goes only to Slack's file hosts or the configured API's host (#30)
        allowed = (*SLACK_FILE_HOSTS, self.opts.base_url)
        return await stream_to_file(check_url(url, allowed), dest, max_bytes=max_bytes,
                                    headers={"Authorization": f"Bearer {self.bot_token}"},
                                    allowed=allowed)

    def upload_limit(self, *, image: bool) -> int:
        return UPLOAD_LIMIT

    async def post_file(
        self, target: ReplyTarget, *, filename: str, data: bytes, caption: str | None,
        image: bool,
    ) -> str:
        """``files_upload_v2`` into the thread (get an upload URL, POST the bytes, complete
        the upload with channel + thread_ts); returns the file id (Slack shares the file in
        the thread as a message of its own, whose ts the completion does not give)."""
        assert self.client is not None
        try:
            resp = await self.client.files_upload_v2(
                filename=filename, content=data, title=filename, channel=target.channel,
                thread_ts=target.thread_root if valid_ts(target.thread_root) else None,
                initial_comment=caption or None,
            )
        except (SlackApiError, SlackClientError, ClientError, TimeoutError) as exc:
            raise _map_error(exc, sending=True) from exc
        info = resp.get("file")
        fid = info.get("id") if isinstance(info, dict) else None
        if not isinstance(fid, str) or not fid:
            raise DeliveryError("unknown", "files.completeUploadExternal gave no file id")
        return fid

    async def find_upload(
        self, target: ReplyTarget, *, filename: str, size: int, since: datetime
    ) -> str | None:
        """A file of that name and size the bot shared in the thread since ``since``
        (:meth:`_posted_since`); its file id."""
        for msg in await self._posted_since(target, since):
            for f in msg.get("files") or []:
                if (isinstance(f, dict) and f.get("name") == filename
                        and f.get("size") == size and isinstance(f.get("id"), str)):
                    return str(f["id"])
        return None

    async def find_progress(self, target: ReplyTarget, *, since: datetime) -> list[str]:
        """The bot's progress placeholders (``⏳ …``) in the thread since ``since``
        (:meth:`_posted_since`), oldest first: a kill hid one before its ts was recorded
        (``bots.progress.ProgressFinder``). Outside a thread none: the channel's top-level
        messages do not say which turn posted them."""
        if not valid_ts(target.thread_root):
            return []
        found = [m for m in await self._posted_since(target, since)
                 if isinstance(m.get("ts"), str) and str(m.get("text") or "").startswith("⏳")]
        return [str(m["ts"]) for m in sorted(found, key=lambda m: float(m["ts"]))]

    async def find_approval(
        self, target: ReplyTarget, *, short_id: str, since: datetime
    ) -> str | None:
        """The bot's message in the thread since ``since`` (:meth:`_posted_since`) whose
        Approve button carries ``short_id`` (:func:`approval_blocks`); its ts."""
        for msg in await self._posted_since(target, since):
            for block in msg.get("blocks") or []:
                if not isinstance(block, dict) or block.get("type") != "actions":
                    continue
                for el in block.get("elements") or []:
                    if (isinstance(el, dict) and el.get("action_id") == APPROVE_ACTION
                            and el.get("value") == short_id and isinstance(msg.get("ts"), str)):
                        return str(msg["ts"])
        return None

    async def _posted_since(self, target: ReplyTarget, since: datetime) -> list[dict[str, Any]]:
        """The bot's messages in the thread (``conversations.replies``; the channel's
        ``conversations.history`` outside a thread) since ``since`` (a minute earlier:
        clocks differ), read back to reconcile a post whose outcome a crash hid.

        Raises:
            DeliveryError: ``unknown``: the thread could not be read.
        """
        assert self.client is not None
        oldest = f"{max(0.0, since.timestamp() - 60.0):.6f}"
        try:
            if valid_ts(target.thread_root):
                resp = await self.client.conversations_replies(
                    channel=target.channel, ts=target.thread_root, oldest=oldest, limit=200)
            else:
                resp = await self.client.conversations_history(
                    channel=target.channel, oldest=oldest, limit=200)
        except (SlackApiError, SlackClientError, ClientError, TimeoutError) as exc:
            raise DeliveryError("unknown", f"cannot read the thread back: {exc}") from exc
        return [msg for msg in resp.get("messages") or []
                if isinstance(msg, dict) and (msg.get("bot_id") == self.bot_id
                                              or msg.get("user") == self.bot_uid)]

    async def react(self, target: ReplyTarget, message_id: str, emoji: str | None) -> None:
        assert self.client is not None
        if not valid_ts(message_id):
            return  # a slash command has no message to react to
        try:
            if emoji:
                name = _REACTION_NAMES.get(emoji, emoji.strip(":"))
                await self.client.reactions_add(channel=target.channel, timestamp=message_id,
                                                name=name)
            else:
                for name in _REACTION_NAMES.values():
                    with contextlib.suppress(SlackApiError):
                        await self.client.reactions_remove(channel=target.channel,
                                                           timestamp=message_id, name=name)
        except SlackApiError as exc:
            if exc.response.get("error") == "already_reacted":
                return
            raise _map_error(exc, sending=False) from exc
        except (SlackClientError, ClientError, TimeoutError) as exc:
            raise _map_error(exc, sending=False) from exc

    async def typing(self, target: ReplyTarget) -> None:
        """Assistant thread status where the app may set it (else the progress message)."""
        assert self.client is not None
        if (not self.opts.status_api or target.channel in self._no_status
                or not valid_ts(target.thread_root)):
            return
        try:
            await self.client.assistant_threads_setStatus(
                channel_id=target.channel, thread_ts=target.thread_root,
                status=self.opts.status_text)
        except SlackApiError as exc:
            error = str(exc.response.get("error"))
            if error in _STATUS_UNAVAILABLE:
                log.info("slack.status_unavailable", channel=target.channel, error=error)
                self._no_status.add(target.channel)
                return
            raise _map_error(exc, sending=False) from exc
        except (SlackClientError, ClientError, TimeoutError) as exc:
            raise _map_error(exc, sending=False) from exc
        self._status_on.add((target.channel, target.thread_root))

    async def _clear_status_if_final(self, target: ReplyTarget, text: str) -> None:
        key = (target.channel, target.thread_root)
        if key not in self._status_on or text.startswith(WORKING):
            return
        self._status_on.discard(key)
        assert self.client is not None
        with contextlib.suppress(SlackApiError, SlackClientError, ClientError, TimeoutError):
            await self.client.assistant_threads_setStatus(
                channel_id=target.channel, thread_ts=target.thread_root, status="")


def _map_error(exc: Exception, *, sending: bool) -> DeliveryError:
    """The one place Slack errors become DeliveryError kinds."""
    if isinstance(exc, SlackApiError):
        status = int(getattr(exc.response, "status_code", 200) or 200)
        error = str(exc.response.get("error") or "")
        if status == 429 or error == "ratelimited":
            headers = getattr(exc.response, "headers", {}) or {}
            raw = headers.get("Retry-After") or headers.get("retry-after") or "1"
            if isinstance(raw, list):
                raw = raw[0] if raw else "1"
            try:
                retry = float(raw)
            except (TypeError, ValueError):
                retry = 1.0
            return DeliveryError("retry", error or "ratelimited", retry_after=retry)
        if error == "message_not_found":
            return DeliveryError("not_found", error)
        if error in _FATAL or (status < 500 and error and error not in (
                "internal_error", "fatal_error", "service_unavailable", "request_timeout")):
            return DeliveryError("fatal", error)
        # Server side trouble: the post may have happened.
        return DeliveryError("unknown" if sending else "retry", error or f"http {status}")
    # Network failure after the request left: for a post the outcome is unknown.
    return DeliveryError("unknown" if sending else "retry", repr(exc))
