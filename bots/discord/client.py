"""The Discord connector's client half: send, edit, react, upload, typing, and the optional
abilities the layer checks for (approval buttons, reading a thread back after a crash).

Replies: a mention in a channel starts a thread on that message (the thread has the
message's id, so the session id is the same before and after); where threads are not
allowed (``reply_mode = "inline"``, or creation refused with 403 / 50013) the bot replies
in place and the reply chain is the thread. 429s are handled by discord.py's own rate
limiter (``max_ratelimit_timeout_s`` bounds a single wait). Every error becomes a
:class:`~bots.port.DeliveryError` kind in one place (:func:`_map_error`).

Pacing: discord.py paces each route's bucket by the ``X-RateLimit-*`` headers of its answers
(a channel's messages: a progress message edited as an answer streams waits for its
channel's bucket instead of meeting a 429; the reporter's next edit then shows the latest
text). It learns of the bot's global limit (50 requests a second) only from a 429, so every
request of the bot's HTTP client takes a slot of :class:`~bots.discord._gateway.GlobalPace`
first (``rate_global_per_s``, 45 by default: a margin under Discord's 50): 50 channels
streaming at once stay under it. The calls of this client take theirs in :meth:`_rest`,
before the call is shielded: a progress edit cancelled while it waits (the final answer
replaces the message) is dropped, never sent after the answer.
"""

from __future__ import annotations

import asyncio
import io
import re
import time
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any, TypeVar

import aiohttp
import discord
import discord.http
import structlog

from bots.discord._convert import approval_components, snowflake
from bots.discord._gateway import COSMETIC, EDIT, PACED, SEND, Link
from bots.discord.format import DISCORD_LIMIT
from bots.discord.options import DiscordOptions
from bots.events import InboundEvent, ReplyTarget
from bots.format import Chunk
from bots.port import DeliveryError

__all__ = ["DISCORD_EPOCH_MS", "NO_MENTIONS", "DiscordClient"]

log = structlog.get_logger(__name__)

T = TypeVar("T")
NO_MENTIONS = discord.AllowedMentions.none()
DISCORD_EPOCH_MS = 1_420_070_400_000
#: the errors a REST call may end with (translated by :func:`_map_error`)
_FAILURES = (discord.DiscordException, aiohttp.ClientError, TimeoutError, OSError)


class DiscordClient:
    """Discord's REST side, as the layer's platform client needs it.

    Args:
        link: the logged-in client and the bot's ids (set at connect).
        options: ``[channels.discord]``.
        render: the connector's Markdown renderer (an action's answer is rendered).
    """

    def __init__(self, *, link: Link, options: DiscordOptions,
                 render: Callable[[str], list[Chunk]]) -> None:
        self.link = link
        self.opts = options
        self._render = render
        self._inflight: set[asyncio.Future[Any]] = set()
        self._threads: set[str] = set()  # roots whose thread exists
        #: root -> its thread's creation under way (the ack's and the first send's: one request)
        self._opening: dict[str, asyncio.Future[bool]] = {}
        self._inline: set[str] = set()  # roots answered in place (threads refused)
        self._where_sent: dict[str, str] = {}  # message id -> channel it was posted in

    def inflight(self) -> list[asyncio.Future[Any]]:
        """Shielded REST calls still running (reaped at stop)."""
        return list(self._inflight)

    async def _rest(self, coro: Coroutine[Any, Any, T], rank: int = SEND) -> T:
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
        client = self.link.client
        if client is None or client.is_closed():
            coro.close()
            raise DeliveryError("retry", "the Discord connector is stopped")
        try:
            # the global budget first, cancellably: a progress edit the final answer
            # replaced while it waited is dropped here, never sent after the answer
            await client.pace.take(rank)
        except BaseException:
            coro.close()
            raise
        paced = PACED.set(True)
        try:
            task = asyncio.ensure_future(coro)  # runs in a copy of this context: paced
        finally:
            PACED.reset(paced)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return await asyncio.shield(task)

    # -- where a reply goes ----------------------------------------------------------------

    async def _ensure_thread(self, parent: str, root: str, title: str) -> bool:
        """Open the thread on ``root`` (idempotent: callers at once share one request);
        False when threads are refused here."""
        if root in self._threads:
            return True
        opening = self._opening.get(root)
        if opening is None:
            opening = self._opening[root] = asyncio.ensure_future(
                self._open_thread(parent, root, title))
            opening.add_done_callback(lambda _done: self._opening.pop(root, None))
        return await asyncio.shield(opening)  # a caller cancelled leaves it to the others

    async def _open_thread(self, parent: str, root: str, title: str) -> bool:
        client = self.link.http()
        try:
            await self._rest(client.http.start_thread_with_message(
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
        self.link.parents[root] = parent
        return True

    async def _opened(self, root: str) -> bool:
        """Whether the thread under way on ``root`` (if any) opened: a "typing" waits for
        it; a failure is the opener's to report (the caller goes on as if none were)."""
        opening = self._opening.get(root)
        if opening is None:
            return False
        try:
            return await asyncio.shield(opening)
        except _FAILURES:
            return False

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
            if root in self._threads or await self._opened(root):
                return root, None
            if create and await self._ensure_thread(target.channel, root,
                                                    str(ex.get("title") or "")):
                return root, None
        return target.channel, ref

    # -- messages --------------------------------------------------------------------------

    async def send(self, target: ReplyTarget, chunk: Chunk, *, plain: bool = False) -> str:
        client = self.link.http()
        text = chunk.fallback if plain else chunk.formatted
        interaction = target.extra.get("interaction")
        if isinstance(interaction, dict) and float(interaction.get("expires", 0)) > time.time():
            sent = await self._followup(str(interaction.get("token", "")), text)
            if sent is not None:
                return sent
        try:
            cid, ref = await self._route(target, create=True)
            channel = client.get_partial_messageable(int(cid))
            reference = (discord.MessageReference(message_id=int(ref), channel_id=int(cid),
                                                  fail_if_not_exists=False)
                         if ref is not None else None)
            if reference is not None:
                msg = await self._rest(channel.send(text, reference=reference,
                                                    allowed_mentions=NO_MENTIONS))
            else:
                msg = await self._rest(channel.send(text, allowed_mentions=NO_MENTIONS))
        except _FAILURES as exc:
            raise _map_error(exc, sending=True) from exc
        self._where_sent[str(msg.id)] = cid
        return str(msg.id)

    async def _followup(self, token: str, text: str) -> str | None:
        client = self.link.http()
        try:
            hook = discord.Webhook.partial(int(self.link.app_id), token, client=client)
            msg = await self._rest(hook.send(text, wait=True, allowed_mentions=NO_MENTIONS))
        except (discord.DiscordException, aiohttp.ClientError, ValueError) as exc:
            log.info("discord.followup_failed_send_instead", error=str(exc))
            return None
        self._where_sent[str(msg.id)] = str(msg.channel.id)
        return str(msg.id)

    async def edit(
        self, target: ReplyTarget, message_id: str, chunk: Chunk, *, plain: bool = False
    ) -> None:
        client = self.link.http()
        text = chunk.fallback if plain else chunk.formatted
        known = self._where_sent.get(message_id)
        if known is not None:
            candidates = [known]
        else:  # after a restart: where the route says, then the other possible place
            routed, _ = await self._route(target, create=False)
            candidates = list(dict.fromkeys([routed, target.thread_root, target.channel]))
        last: DeliveryError | None = None
        for cid in candidates:
            msg = client.get_partial_messageable(int(cid)).get_partial_message(
                int(message_id))
            try:
                # view=None: no components. GEODE's only ones are an approval request's
                # buttons, and the edit of a request shows its outcome (no more clicks).
                await self._rest(msg.edit(content=text, allowed_mentions=NO_MENTIONS,
                                          view=None), EDIT)
                self._where_sent[message_id] = cid
                return
            except _FAILURES as exc:
                last = _map_error(exc, sending=False)
                if last.kind != "not_found":
                    raise last from exc
        assert last is not None
        raise last

    async def react(self, target: ReplyTarget, message_id: str, emoji: str | None) -> None:
        client = self.link.http()
        thread = target.extra.get("thread_id")
        cid = thread if isinstance(thread, str) and thread else target.channel
        msg = client.get_partial_messageable(int(cid)).get_partial_message(int(message_id))
        try:
            if emoji:
                await self._open_early(target)
                # last, leaving most of the budget: the turn runs beside it, not after it
                await self._rest(msg.add_reaction(emoji), COSMETIC)
            elif client.user is not None:
                for e in (self.opts.ack_emoji,):
                    if e:
                        await self._rest(msg.remove_reaction(e, client.user), EDIT)
        except _FAILURES as exc:
            raise _map_error(exc, sending=False) from exc

    async def _open_early(self, target: ReplyTarget) -> None:
        """The ack (a turn starting) opens its reply's thread at once, at a new message's
        rank: the thread would be opened by the first words' send otherwise, so at 50 chats
        at once the first words would wait for 50 threads' requests made only then. A
        failure is left to that send, which tries again."""
        try:
            await self._route(target, create=True)
        except (*_FAILURES, DeliveryError) as exc:
            log.info("discord.thread_open_failed", error=str(exc))

    async def typing(self, target: ReplyTarget) -> None:
        client = self.link.http()
        try:
            cid, _ = await self._route(target, create=False)
            await self._rest(client.http.send_typing(int(cid)), COSMETIC)
        except _FAILURES as exc:
            raise _map_error(exc, sending=False) from exc

    # -- files -----------------------------------------------------------------------------

    def upload_limit(self, *, image: bool) -> int:
        return int(self.opts.max_upload_mb * (1 << 20))

    async def post_file(
        self, target: ReplyTarget, *, filename: str, data: bytes, caption: str | None,
        image: bool,
    ) -> str:
        """A message with the file as its attachment (multipart ``POST
        /channels/{id}/messages``), in the thread the replies go to."""
        client = self.link.http()
        text = (caption or "")[:DISCORD_LIMIT] or None
        try:
            cid, _ = await self._route(target, create=True)
            channel = client.get_partial_messageable(int(cid))
            msg = await self._rest(channel.send(
                text, file=discord.File(io.BytesIO(data), filename=filename),
                allowed_mentions=NO_MENTIONS))
        except _FAILURES as exc:
            raise _map_error(exc, sending=True) from exc
        self._where_sent[str(msg.id)] = cid
        return str(msg.id)

    # -- approval buttons ------------------------------------------------------------------

    async def send_approval(self, target: ReplyTarget, chunk: Chunk, *, short_id: str) -> str:
        """The request with an action row of two buttons, Approve and Deny (custom ids
        ``geode:approve:<short id>`` / ``geode:deny:<short id>``). A click comes back as a
        gateway INTERACTION_CREATE (``DiscordInbound.on_click``), whichever process
        receives it: the buttons are plain message components, not a discord.py View living
        in memory."""
        client = self.link.http()
        try:
            cid, ref = await self._route(target, create=True)
            payload: dict[str, Any] = {
                "content": chunk.formatted, "allowed_mentions": NO_MENTIONS.to_dict(),
                "components": approval_components(short_id),
            }
            if ref is not None:
                payload["message_reference"] = {"message_id": ref, "channel_id": cid,
                                                "fail_if_not_exists": False}
            route = discord.http.Route("POST", "/channels/{channel_id}/messages",
                                       channel_id=int(cid))
            data = await self._rest(client.http.request(route, json=payload))
        except _FAILURES as exc:
            raise _map_error(exc, sending=True) from exc
        mid = snowflake(data.get("id")) if isinstance(data, dict) else None
        if mid is None:
            raise DeliveryError("unknown", "Discord answered the request without a message id")
        self._where_sent[mid] = cid
        return mid

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        """The answer to a click, as an ephemeral follow-up of its interaction (flags 64:
        only the clicker sees it). Raises :class:`DeliveryError` when that is not possible
        any more (the token lives 15 minutes): the layer then answers in the thread."""
        comp = event.extra.get("component")
        if not isinstance(comp, dict):
            return
        client = self.link.http()
        token = comp.get("token")
        if not isinstance(token, str) or float(comp.get("expires", 0)) <= time.time():
            raise DeliveryError("fatal", "the click's interaction has expired")
        hook = discord.Webhook.from_state(
            data={"id": int(self.link.app_id), "type": 3, "token": token},
            state=client._connection)
        try:
            await self._rest(hook.send(self._render(text)[0].formatted, ephemeral=True,
                                       allowed_mentions=NO_MENTIONS))
        except _FAILURES as exc:
            raise _map_error(exc, sending=True) from exc

    # -- reading a thread back (reconciling a post a crash hid) ----------------------------

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
        client = self.link.http()
        after = max(0, int((since.timestamp() - 60.0) * 1000) - DISCORD_EPOCH_MS) << 22
        found: list[dict[str, Any]] = []
        try:
            routed, _ = await self._route(target, create=False)
            for cid in dict.fromkeys([routed, target.thread_root, target.channel]):
                if snowflake(cid) is None:
                    continue
                try:
                    page: list[Any] = await self._rest(
                        client.http.logs_from(int(cid), 100, after=after))
                except discord.NotFound:
                    continue  # no such thread (the reply went inline)
                for m in page:
                    if (isinstance(m, dict)
                            and str((m.get("author") or {}).get("id")) == self.link.bot_id):
                        found.append(m)
        except _FAILURES as exc:
            raise DeliveryError("unknown", f"cannot read the thread back: {exc}") from exc
        return found


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


def _of_turn(message: dict[str, Any], target: ReplyTarget) -> bool:
    """A bot message posted for ``target``'s turn: in a thread (its own), or in the channel
    as a reply to the turn's message."""
    if str(message.get("channel_id")) != target.channel:
        return True
    ref = message.get("message_reference")
    return (target.reply_to is not None and isinstance(ref, dict)
            and str(ref.get("message_id")) == target.reply_to)
