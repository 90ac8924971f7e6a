"""The Slack client: what the layer sends through (send / edit / react / upload / typing),
the ``ApprovalControls`` (Block Kit buttons, ephemeral answers), ``ReadBack`` (the bot's
posts found again in ``conversations.replies``), ``NativeStream`` (``chat.startStream`` /
``appendStream`` / ``stopStream``) and ``AttachmentReader`` abilities, on slack_sdk's
``AsyncWebClient``. Slack errors become :class:`~bots.port.DeliveryError` kinds in
one place, :func:`_map_error`.

A mixin of :class:`~bots.slack.connector.SlackConnector`: it reads the Web API client and
the bot's identity the connector learns at connect; it holds nothing of the intake.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog
from aiohttp import ClientError
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bots._download import TOO_LARGE, check_url, stream_to_file
from bots.events import Attachment, InboundEvent, ReplyTarget
from bots.format import Chunk
from bots.port import AttachmentRefused, DeliveryError
from bots.progress import WORKING
from bots.slack._actions import APPROVE_ACTION, approval_blocks
from bots.slack._convert import valid_ts
from bots.slack.options import SlackOptions

__all__ = ["SLACK_FILE_HOSTS", "UPLOAD_LIMIT", "CallBudget", "SlackClient"]

log = structlog.get_logger(__name__)

#: where Slack serves ``url_private`` (commercial and GovSlack); nothing else gets the token
SLACK_FILE_HOSTS = ("https://files.slack.com", "https://slack-files.com",
                    "https://files.slack-gov.com")
#: files_upload_v2's limit (Slack's: 1 GB a file)
UPLOAD_LIMIT = 1 << 30

#: emoji the layer asks for -> Slack reaction names
_REACTION_NAMES = {"👀": "eyes", "✅": "white_check_mark", "⏳": "hourglass_flowing_sand",
                   "⚠️": "warning", "⏹": "black_square_for_stop"}
#: assistant.threads.setStatus answers meaning "not available here": fall back for the channel
_STATUS_UNAVAILABLE = {"missing_scope", "not_allowed_token_type", "invalid_arguments",
                       "channel_not_found", "not_allowed", "unknown_method", "no_permission",
                       "method_not_supported_for_channel_type", "feature_not_enabled",
                       "thread_not_found", "invalid_thread_ts"}
#: chat.startStream answers meaning "no streaming here" (an older workspace, a channel type
#: it does not serve, a token without the scope): paced chat.update edits for the channel
_STREAM_UNAVAILABLE = {"unknown_method", "not_allowed", "not_allowed_token_type",
                       "method_not_supported_for_channel_type", "missing_scope",
                       "feature_not_enabled", "no_permission", "invalid_arguments",
                       "channel_type_not_supported", "team_not_found", "user_not_found"}
#: the answer of a stream that has ended (stopped, or expired after a silence)
_NOT_STREAMING = "message_not_in_streaming_state"
#: the open streams a process remembers (their ts); an edit ends one first
_MAX_OPEN_STREAMS = 1000
_FATAL = {"channel_not_found", "not_in_channel", "is_archived", "invalid_auth", "not_authed",
          "account_inactive", "token_revoked", "missing_scope", "restricted_action",
          "cant_update_message", "msg_too_long", "no_text", "invalid_blocks",
          "not_allowed_token_type", "ekm_access_denied", "team_access_not_granted"}


class CallBudget:
    """How many calls of a method a workspace may make a minute (Slack's rate tiers), as a
    bucket refilled evenly that holds ten seconds' worth: a streamed draft is cosmetic, so a
    call that finds it empty is skipped (the next state, or the answer, shows instead), never
    queued or sent into a 429. ``per_min`` 0: no limit."""

    def __init__(self, per_min: float) -> None:
        self.rate = per_min / 60.0
        self.cap = max(1.0, per_min / 6.0)
        self.tokens = self.cap
        self._at = time.monotonic()

    def take(self, *, keep: float = 0.0) -> bool:
        """One call's share; False (nothing taken) when fewer than ``keep`` would be left."""
        if self.rate <= 0:
            return True
        now = time.monotonic()
        self.tokens = min(self.cap, self.tokens + (now - self._at) * self.rate)
        self._at = now
        if self.tokens < 1.0 + keep:
            return False
        self.tokens -= 1.0
        return True


class SlackClient:
    """Slack's outbound half (see the module docstring)."""

    #: the Web API client (built at connect)
    client: AsyncWebClient | None
    opts: SlackOptions
    bot_token: str
    #: the bot's user id and bot id (``auth.test``): what the bot posted is found by them
    bot_uid: str
    bot_id: str
    team_id: str
    #: channels where the assistant status is not available; threads whose status is set
    _no_status: set[str]
    _status_on: set[tuple[str, str]]
    #: channels where chat streaming was refused; this process's open streams
    _no_stream: set[str]
    _streams: OrderedDict[str, None]
    #: the workspace's budgets of streams (chat.startStream and .stopStream, Tier 2) and
    #: of appends (chat.appendStream, Tier 4)
    _stream_starts: CallBudget
    _stream_appends: CallBudget
    #: the workspace's budget of chat.update (Tier 3): drafts take it, answers count in it
    _updates: CallBudget


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
        self._updates.take()  # counted in the workspace's budget, never held back
        await self._update(target, message_id, chunk, plain=plain)

    async def stream_draft(self, target: ReplyTarget, message_id: str, chunk: Chunk) -> None:
        """A draft that does not stream natively (:class:`bots.progress.DraftStreamer`): a
        ``chat.update`` of the progress message, skipped while less than half of the
        workspace's ``chat.update`` budget (Tier 3, ``updates_per_min``) is left, so the
        answers keep the rest; the next state carries the latest text."""
        if self._updates.take(keep=self._updates.cap / 2):
            await self._update(target, message_id, chunk, plain=False)

    async def _update(
        self, target: ReplyTarget, message_id: str, chunk: Chunk, *, plain: bool
    ) -> None:
        assert self.client is not None
        text = chunk.fallback if plain else chunk.formatted
        if message_id in self._streams:
            # a draft streaming into the message: ended first, then replaced whole
            with contextlib.suppress(DeliveryError):
                await self.stop_stream(target, message_id)
        try:
            # blocks=[]: Slack keeps a message's blocks through an update that names none;
            # an edit replaces the whole message (an approval request loses its buttons)
            await self.client.chat_update(channel=target.channel, ts=message_id, text=text,
                                          blocks=[])
        except (SlackApiError, SlackClientError, ClientError, TimeoutError) as exc:
            raise _map_error(exc, sending=False) from exc
        await self._clear_status_if_final(target, text)

    def can_stream(self, target: ReplyTarget) -> bool:
        """Chat streaming is tried in threads (``chat.startStream`` needs a ``thread_ts``)
        of channels where Slack refused none (``[channels.slack] native_stream``), to a known
        recipient (:func:`_has_recipient`), while the workspace's budget of streams
        (``stream_starts_per_min``: a start and its stop are Tier 2 calls) has one left:
        taken here, else this turn's draft goes by edits."""
        return (self.opts.native_stream and valid_ts(target.thread_root)
                and target.channel not in self._no_stream and _has_recipient(target)
                and self._stream_starts.take())

    async def start_stream(self, target: ReplyTarget, markdown: str) -> str:
        """``chat.startStream`` in the thread, to the person who asked (Slack needs the
        recipient outside direct messages); its ts. A refusal that means "not here" marks
        the channel (:meth:`can_stream` then says no) and is ``fatal``."""
        assert self.client is not None
        user, team = target.extra.get("user"), target.extra.get("team")
        to_user = (user if isinstance(user, str) and user and not target.channel.startswith("D")
                   else None)
        to_team = (team if isinstance(team, str) and team else self.team_id) if to_user else None
        try:
            resp = await self.client.chat_startStream(
                channel=target.channel, thread_ts=target.thread_root, markdown_text=markdown,
                recipient_user_id=to_user, recipient_team_id=to_team)
        except SlackApiError as exc:
            error = str(exc.response.get("error"))
            if error in _STREAM_UNAVAILABLE:
                log.info("slack.stream_unavailable", channel=target.channel, error=error)
                self._no_stream.add(target.channel)
                raise DeliveryError("fatal", error) from exc
            raise _map_error(exc, sending=True) from exc
        except (SlackClientError, ClientError, TimeoutError) as exc:
            raise _map_error(exc, sending=True) from exc
        ts = str(resp["ts"])
        self._streams[ts] = None
        while len(self._streams) > _MAX_OPEN_STREAMS:
            self._streams.popitem(last=False)
        return ts

    async def append_stream(self, target: ReplyTarget, message_id: str, markdown: str) -> None:
        """``chat.appendStream`` (Tier 4): at most one per progress edit interval in a thread
        and ``stream_appends_per_min`` in the workspace (``retry``: skipped, the next append
        carries the text); ``fatal`` once the stream has ended (stopped, or expired at Slack)."""
        assert self.client is not None
        if message_id not in self._streams:
            raise DeliveryError("fatal", _NOT_STREAMING)
        if not self._stream_appends.take():
            # skipped: the text comes with a later append, or the answer replaces it
            raise DeliveryError("retry", "stream appends paced")
        try:
            await self.client.chat_appendStream(channel=target.channel, ts=message_id,
                                                markdown_text=markdown)
        except SlackApiError as exc:
            if exc.response.get("error") == _NOT_STREAMING:
                self._streams.pop(message_id, None)
                raise DeliveryError("fatal", _NOT_STREAMING) from exc
            raise _map_error(exc, sending=False) from exc
        except (SlackClientError, ClientError, TimeoutError) as exc:
            raise _map_error(exc, sending=False) from exc

    async def stop_stream(self, target: ReplyTarget, message_id: str) -> None:
        """``chat.stopStream`` (a stream that already ended is no error)."""
        assert self.client is not None
        self._streams.pop(message_id, None)
        try:
            await self.client.chat_stopStream(channel=target.channel, ts=message_id)
        except SlackApiError as exc:
            if exc.response.get("error") == _NOT_STREAMING:
                return
            raise _map_error(exc, sending=False) from exc
        except (SlackClientError, ClientError, TimeoutError) as exc:
            raise _map_error(exc, sending=False) from exc

    async def delete_message(self, target: ReplyTarget, message_id: str) -> None:
        """``chat.delete`` (a message already gone is no error)."""
        assert self.client is not None
        self._streams.pop(message_id, None)
        try:
            await self.client.chat_delete(channel=target.channel, ts=message_id)
        except SlackApiError as exc:
            if exc.response.get("error") == "message_not_found":
                return
            raise _map_error(exc, sending=False) from exc
        except (SlackClientError, ClientError, TimeoutError) as exc:
            raise _map_error(exc, sending=False) from exc

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




def _has_recipient(target: ReplyTarget) -> bool:
    """Whether a stream may go to ``target``: a direct message, or a channel whose event named
    the person who asked (Slack needs the recipient there; an event stored before it was
    kept, or a command's, streams by edits rather than be refused)."""
    user = target.extra.get("user")
    return target.channel.startswith("D") or (isinstance(user, str) and bool(user))


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
