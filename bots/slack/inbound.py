"""Slack's inbound half: Events API callbacks, ``/geode`` commands and button clicks turned
into neutral events and recorded before they are acknowledged (see
:mod:`bots.slack.connector` for the two transports), and the catch-up after downtime
(:mod:`bots.slack._history`).

Redeliveries (``X-Slack-Retry-Num``, ``retry_attempt``, a replayed envelope) and the
``message`` + ``app_mention`` pair of one post map to one dedupe key (channel + ts), so the
store keeps one row and the layer answers once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app, send_async_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest

from bots.connector import BaseConnector
from bots.console.chat_command import console_command
from bots.events import InboundEvent
from bots.slack._actions import convert_action, is_block_actions
from bots.slack._convert import (
    COMMAND_NAMES,
    SlashCommand,
    command_event,
    convert_message,
    event_marker,
    parse_slash,
)
from bots.slack._history import SlackHistory
from bots.slack.options import SlackOptions
from geode.settings import BindingSettings

__all__ = ["SLACK_HELP", "SlackInbound"]

log = structlog.get_logger(__name__)

#: how many recorded dedupe keys the intake remembers (a duplicate comes right after)
_RECORDED_KEYS = 1024

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
    "`/geode model [ID] [thread]`    the thread's model, or switch it to ID\n"
    "`/geode usage [thread]`   tokens of the thread and yours today, against the caps\n"
    "`/geode remind WHEN WHAT [thread]`  I do WHAT in the thread then (in 10m, tomorrow "
    "09:00, every day 09:00, cron \"0 9 * * 1\")\n"
    "`/geode reminders [cancel ID] [thread]`  the thread's reminders; cancel one\n"
    "`/geode console`          (in a direct message with me) a web console sign-in link\n"
    "`/geode help`             this text\n"
    "[thread] is a thread's message link or ts; without it the command acts on the "
    "channel's thread with the running (else latest) turn."
)


class _RecordFirst(AsyncMiddleware):
    """The bolt app's one global middleware: record, then let bolt acknowledge (200)."""

    def __init__(self, connector: SlackInbound) -> None:
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

    def __init__(self, app: AsyncApp, *, connector: SlackInbound, **kw: Any) -> None:
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



class SlackInbound(BaseConnector):
    """The intake of :class:`~bots.slack.connector.SlackConnector` (see the module
    docstring): what it reads is set up by the connector's ``__init__`` and ``connect``."""

    opts: SlackOptions
    app: AsyncApp | None
    team_id: str
    bot_uid: str
    bot_id: str
    http_port: int
    _web: web.AppRunner | None
    history: SlackHistory
    #: the last live message's ts per channel (its catch-up cursor only moves forward)
    _cursor_seen: dict[str, float]
    #: dedupe keys this process recorded (committed) lately, oldest first: Slack sends
    #: a mention twice (``message`` and ``app_mention``, one key), and the second needs
    #: no write transaction to be found a duplicate
    _recorded: OrderedDict[str, None]
    #: the records under way (the two deliveries come at once): key -> (done, cursor)
    _recording: dict[str, tuple[asyncio.Future[bool], tuple[str, str] | None]]

    def cursor_name(self, channel: str) -> str:
        return f"slack:{self.team_id}:{channel}:ts"

    # -- the HTTP Events API endpoint -------------------------------------------------------

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
        if cmd.name == "console":  # its sign-in link in the ack, which its sender alone sees
            return await console_command(self.host, "slack", cmd.user,
                                         dm=cmd.channel.startswith("D"))
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
