"""The Discord connector's inbound half: gateway payloads and interactions -> neutral events,
recorded durably, and the catch-up after every READY / RESUMED.

Intake: the gateway's ``MESSAGE_CREATE`` parser is replaced so that each raw payload is
queued, in gateway order (:meth:`DiscordInbound.wrap_parser`). One intake task
(:meth:`DiscordInbound.run`) converts queued payloads and records them, each channel's
batch in one transaction with that channel's cursor (the last recorded message id). Only
messages of bound channels (and their threads) are recorded.

Catch-up: the history of each bound channel and of its active threads after the persisted
cursor (minus a small overlap) is read and recorded; the unique per-message key makes the
overlap and the live/catch-up race harmless.

Interactions: a slash command is recorded like a message (``/name``); a click on an
approval button as the clicker's ``/approve ID`` / ``/deny ID``. Both are acknowledged
only after the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Protocol

import discord
import structlog

from bots._download import check_url, stream_to_file
from bots.commands import COMMANDS
from bots.console.chat_command import asks_for_link
from bots.discord._convert import convert_message, parse_action, snowflake, snowflake_seconds
from bots.discord._gateway import Link
from bots.discord._history import fetch_thread_history
from bots.discord.options import DiscordOptions
from bots.events import Attachment, InboundEvent
from bots.port import AttachmentRefused, Intake

__all__ = ["DISCORD_CDN_HOSTS", "DiscordInbound", "Submit"]

log = structlog.get_logger(__name__)

#: Discord's attachment CDN hosts (the signed URLs the gateway gives point there)
DISCORD_CDN_HOSTS = ("https://cdn.discordapp.com", "https://media.discordapp.net")
_THREAD_TYPES = (10, 11, 12)


class Submit(Protocol):
    """Record events (and move a cursor) durably: ``BaseConnector.submit``."""

    async def __call__(self, events: Sequence[tuple[InboundEvent, str]], *,
                       cursor: tuple[str, str] | None = None) -> list[int]: ...


class DiscordInbound:
    """What comes in from Discord, recorded before it is acknowledged.

    Args:
        link: the logged-in client and the bot's ids (set at connect).
        options: ``[channels.discord]``.
        intake: the layer's intake port (the layer is built when the connector starts,
            before it connects).
        submit: records events (and a cursor) before they are acknowledged: the
            connector's ``submit``.
    """

    def __init__(self, *, link: Link, options: DiscordOptions,
                 intake: Callable[[], Intake], submit: Submit) -> None:
        self.link = link
        self.opts = options
        self._intake = intake
        self._submit = submit
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._spawned: set[asyncio.Task[Any]] = set()
        self._catch_up_lock = asyncio.Lock()
        #: channel id -> highest message id recorded with its cursor
        self._cursors: dict[str, int] = {}
        self.catch_ups = 0

    @property
    def intake(self) -> Intake:
        return self._intake()

    def cursor_name(self, channel_id: str) -> str:
        return f"discord:{self.link.bot_id}:ch:{channel_id}"

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)

    def spawned(self) -> list[asyncio.Task[Any]]:
        """Catch-ups still running (they record, they do not process: reaped at stop)."""
        return list(self._spawned)

    # -- intake ----------------------------------------------------------------------------

    def wrap_parser(self) -> None:
        parsers: dict[str, Callable[[Any], None]] = self.link.http()._connection.parsers

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

    async def run(self) -> None:
        """The intake loop: queued payloads, in order, recorded in batches of up to 100."""
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

    async def parent_of(self, channel_id: str) -> str:
        """The parent channel of a thread ("" when ``channel_id`` is not a thread)."""
        parents = self.link.parents
        if channel_id in parents:
            return parents[channel_id]
        client = self.link.http()
        parent = ""
        cached = client.get_channel(int(channel_id))
        if isinstance(cached, discord.Thread):
            parent = str(cached.parent_id)
        elif cached is None:
            try:
                raw: dict[str, Any] = dict(await client.http.get_channel(int(channel_id)))
                if raw.get("type") in _THREAD_TYPES and raw.get("parent_id"):
                    parent = str(raw["parent_id"])
            except discord.HTTPException:
                log.debug("discord.channel_lookup_failed", channel=channel_id)
        parents[channel_id] = parent
        return parent

    async def _bound(self, channel: str) -> bool:
        return await self.intake.binding_for("discord", self.link.bot_id, channel) is not None

    async def ingest(self, payloads: list[dict[str, Any]]) -> None:
        """Convert and record payloads; each channel's events with its cursor, atomically."""
        groups: dict[str, list[dict[str, Any]]] = {}
        for data in payloads:
            cid = snowflake(data.get("channel_id"))
            if cid is not None and snowflake(data.get("id")) is not None:
                groups.setdefault(cid, []).append(data)
        for cid, items in groups.items():
            if all(_author(d) == self.link.bot_id for d in items):
                # Only our own messages came back (the progress message, an answer's
                # chunks): nothing to record, and no cursor write for them (a write
                # transaction per reply); a catch-up reads them again and drops them.
                continue
            parent = await self.parent_of(cid)
            if not await self._bound(parent or cid):
                # a direct message asking for a console sign-in link is the one unbound
                # message recorded (bots.console.chat_command answers it)
                asks = [e for d in items
                        if d.get("guild_id") is None and asks_for_link(d.get("content"))
                        if (e := await self._convert(d, None)) is not None and e.is_dm]
                if asks:
                    await self._submit([(e, "received") for e in asks])
                else:
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
                await self._submit(events, cursor=cursor)
            self._cursors[cid] = max(known, top)

    async def _convert(self, data: dict[str, Any], parent: str | None) -> InboundEvent | None:
        bot_id = self.link.bot_id
        try:
            draft = convert_message(data, bot_id=bot_id, parent_id=parent)
        except Exception:  # a converter bug must not stop the intake
            log.warning("discord.convert_failed", exc_info=True)
            return None
        if draft is None:
            return None
        ev = draft.event
        if ev.sender == bot_id:
            return None  # our own messages come back on the gateway
        if draft.needs_root and ev.reply_to is not None:
            root = await self.intake.thread_of("discord", bot_id, ev.channel, ev.reply_to)
            if root is not None:  # a reply chain the bot answered in place
                ev = ev.with_thread(root)
                extra = {**ev.extra, "start_thread": False}
                ev = InboundEvent.from_json({**ev.to_json(), "extra": extra})
        return ev

    async def fetch_thread_history(self, event: InboundEvent) -> list[InboundEvent]:
        """Earlier messages of a thread the bot is first mentioned in, the ones the store
        has not recorded (recorded ones reach the prompt through the layer already)."""
        if self.link.client is None:
            return []
        found = await fetch_thread_history(self.link.client.http, event,
                                           bot_id=self.link.bot_id,
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
            saved = await self.intake.cursors.get(self.cursor_name(channel_id))
            self._cursors[channel_id] = int(saved) if saved and saved.isdigit() else 0
        return self._cursors[channel_id]

    # -- catch-up --------------------------------------------------------------------------

    def on_gateway_ready(self, kind: str) -> None:
        log.info("discord.gateway_up", how=kind, bot=self.link.bot_id)
        self.link.gateway_up = True
        self._spawn(self.catch_up(), name=f"discord-catch-up-{kind}")

    async def catch_up(self) -> None:
        """Record what bound channels and their active threads got after their cursors."""
        async with self._catch_up_lock:
            try:
                await self._catch_up()
            except Exception:
                log.warning("discord.catch_up_failed", exc_info=True)
            self.catch_ups += 1

    async def _watermark(self) -> int:
        """The newest cursor of any channel: the lower bound for channels without one."""
        return await self.intake.cursors.watermark(f"discord:{self.link.bot_id}:ch:")

    async def _catch_up(self) -> None:
        client = self.link.http()
        await self.intake.refresh_bindings()
        bound = {b.channel for b in self.intake.bound_channels("discord")}
        watermark = await self._watermark()
        guilds: set[int] = set()
        for cid in sorted(bound):
            if snowflake(cid) is None:
                continue
            try:
                raw: dict[str, Any] = dict(await client.http.get_channel(int(cid)))
            except discord.HTTPException as exc:
                log.warning("discord.bound_channel_unavailable", channel=cid, error=str(exc))
                continue
            if snowflake(raw.get("guild_id")):
                guilds.add(int(raw["guild_id"]))
            await self._history(cid, watermark)
        for gid in sorted(guilds):
            try:
                active = await client.http.get_active_threads(gid)
            except discord.HTTPException as exc:
                log.warning("discord.active_threads_failed", guild=gid, error=str(exc))
                continue
            for t in active.get("threads", []):
                tid, parent = snowflake(t.get("id")), snowflake(t.get("parent_id"))
                if tid is None or parent not in bound:
                    continue
                self.link.parents[tid] = parent
                await self._history(tid, watermark)

    async def _history(self, channel_id: str, watermark: int) -> None:
        client = self.link.http()
        start = await self._known_cursor(channel_id) or watermark
        if not start:
            return  # first start ever: nothing was missed
        overlap = int(self.opts.catch_up_overlap_s * 1000) << 22
        after = max(0, start - overlap)
        for _ in range(self.opts.catch_up_max_pages):
            try:
                page = await client.http.logs_from(int(channel_id), 100, after=after)
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

    # -- interactions ----------------------------------------------------------------------

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
        parent = await self.parent_of(cid)
        if not await self._bound(parent or cid):
            await interaction.response.send_message(
                "This channel is not bound to GEODE.", ephemeral=True)
            return
        bot_id = self.link.bot_id
        iid = str(interaction.id)
        extra: dict[str, Any] = {
            "guild": str(interaction.guild_id or ""),
            "interaction": {"token": interaction.token, "expires": time.time() + 14 * 60},
        }
        if parent:
            extra["thread_id"] = cid
        user = interaction.user
        event = InboundEvent(
            platform="discord", workspace=bot_id, channel=parent or cid, thread_root=cid,
            message_id=iid, sender=str(user.id), sender_name=user.display_name,
            dedupe_key=f"discord:{bot_id}:interaction:{iid}", text=_command_text(name, data),
            mentions_bot=True, date=snowflake_seconds(iid), extra=extra,
        )
        try:
            await self._submit([(event, "received")])
        except Exception:
            log.exception("discord.interaction_record_failed")
            await interaction.response.send_message("⚠️ Not recorded; please try again.",
                                                    ephemeral=True)
            return
        # Acknowledged only after the record (Discord allows 3 s); the answer follows.
        with contextlib.suppress(discord.HTTPException):
            await interaction.response.defer(thinking=True)

    async def on_click(self, interaction: discord.Interaction[Any]) -> None:
        """A click on an approval button (MESSAGE_COMPONENT): recorded as the ``/approve ID``
        / ``/deny ID`` command of the user who clicked, in the request message's thread, then
        acknowledged as a deferred update (Discord allows 3 s; nothing changes yet). The
        command decides (the store's conditional update: a double click decides once), the
        request message is edited to show the outcome without its buttons, and the clicker
        gets the command's answer as an ephemeral follow-up
        (``DiscordClient.answer_action``), e.g. "Only X, Y may approve". Its dedupe key is
        the interaction's id: an interaction delivered twice is recorded once."""
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
        parent = await self.parent_of(cid)
        if not await self._bound(parent or cid):
            with contextlib.suppress(discord.HTTPException):
                await interaction.response.send_message(
                    "This channel is not bound to GEODE.", ephemeral=True)
            return
        bot_id = self.link.bot_id
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
            root = await self.intake.thread_of("discord", bot_id, cid, mid) or mid
        event = InboundEvent(
            platform="discord", workspace=bot_id, channel=parent or cid,
            thread_root=root, message_id=mid, sender=str(user.id),
            sender_name=user.display_name, sender_is_bot=bool(user.bot),
            dedupe_key=f"discord:{bot_id}:interaction:{iid}",
            text=f"/{verb} {short_id}", mentions_bot=True, reply_to=mid, reply_to_bot=True,
            date=snowflake_seconds(iid), extra=extra,
        )
        try:
            await self._submit([(event, "received")])
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


def _author(data: dict[str, Any]) -> str | None:
    """The id of a MESSAGE_CREATE payload's author."""
    author = data.get("author")
    return snowflake(author.get("id")) if isinstance(author, dict) else None


def _command_text(name: str, data: dict[str, Any]) -> str:
    """A slash command as the typed command it stands for: ``/remind`` with its ``when`` and
    ``what`` is ``/remind in 10m check it``, ``/reminders`` with ``cancel`` is ``/reminders
    cancel ID`` (the options in the order they came, string values only)."""
    words = [f"/{name}"]
    for option in data.get("options") or ():
        if not isinstance(option, dict) or not isinstance(option.get("value"), str):
            continue
        if option.get("name") == "cancel":
            words.append("cancel")
        words.append(" ".join(option["value"].split())[:2000])
    return " ".join(w for w in words if w)
