"""Catch-up after downtime and thread context, from Slack's history APIs.

For each bound channel, ``conversations.history`` over the last ``catch_up_max_age_s`` gives
the top-level posts missed (those after the channel's persisted cursor) and the threads with
replies since the cursor, even under an old root; ``conversations.replies`` gives the missed
replies of those threads and of the threads the bot is engaged in. Everything is recorded oldest
first through the connector's normal intake (so the dedupe key drops what the event stream
delivered too), and the cursor moves with each recorded batch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import structlog
from slack_sdk.errors import SlackApiError

from bots.events import InboundEvent
from bots.slack._convert import valid_ts

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

    from bots.port import Intake
    from geode.settings import BindingSettings

__all__ = ["HistoryHost", "SlackHistory"]

log = structlog.get_logger(__name__)


class _HistoryOptions(Protocol):
    @property
    def catch_up_max_age_s(self) -> float: ...

    @property
    def catch_up_max_threads(self) -> int: ...

    @property
    def history_page_size(self) -> int: ...


class HistoryHost(Protocol):
    """What the history reads use of their connector (``SlackConnector`` is one)."""

    client: AsyncWebClient | None
    team_id: str
    bot_uid: str
    catch_up_from: dict[str, str]

    @property
    def intake(self) -> Intake: ...

    @property
    def opts(self) -> _HistoryOptions: ...

    def bound_channels(self) -> list[BindingSettings]: ...

    def convert(self, event: Any, channel: str | None = None) -> InboundEvent | None: ...

    def cursor_name(self, channel: str) -> str: ...

    async def submit(
        self, events: Sequence[tuple[InboundEvent, str]], *, cursor: tuple[str, str] | None = None
    ) -> list[int]: ...


class SlackHistory:
    """History reads of one connector."""

    def __init__(self, *, connector: HistoryHost) -> None:
        self.c = connector

    async def catch_up(self) -> None:
        """Record what bound channels got while nobody listened (history from the cursor)."""
        for b in self.c.bound_channels():
            try:
                await self._catch_up_channel(b.channel)
            except Exception:
                log.warning("slack.catch_up_failed", channel=b.channel, exc_info=True)

    async def _catch_up_channel(self, channel: str) -> None:
        assert self.c.client is not None
        name = self.c.cursor_name(channel)
        since = self.c.catch_up_from.pop(channel, None)
        if since is None:
            since = await self.c.intake.cursors.get(name)
        now = time.time()
        if since is None or not valid_ts(since):
            # First contact with this channel: its past is not ours to answer.
            await self.c.intake.cursors.set(name, f"{now:.6f}")
            return
        horizon = now - self.c.opts.catch_up_max_age_s
        oldest = max(float(since), horizon)
        oldest_ts = f"{oldest:.6f}"
        found, roots = await self._missed_posts(channel, horizon=horizon, oldest=oldest)
        for root in await self._engaged_roots(channel):
            roots.add(root)
        for root in sorted(roots)[-self.c.opts.catch_up_max_threads:]:
            try:
                replies = await self._pages("conversations_replies", channel=channel, ts=root,
                                            oldest=oldest_ts)
            except SlackApiError as exc:
                log.info("slack.catch_up_thread_failed", root=root,
                         error=exc.response.get("error"))
                continue
            for msg in replies:
                ts = msg.get("ts")
                if valid_ts(ts) and float(ts) > oldest:
                    found[ts] = msg
        events: list[InboundEvent] = []
        for ts in sorted(found, key=float):
            ev = self.c.convert(found[ts], channel=channel)
            if ev is None or ev.sender == self.c.bot_uid:
                continue  # our own posts and non-messages are not worth a row
            events.append(ev)
        for i in range(0, len(events), 100):
            batch = events[i:i + 100]
            # Oldest first, each batch with the cursor at its newest message: a crash
            # between batches resumes after what is recorded.
            await self.c.submit([(ev, "received") for ev in batch],
                              cursor=(name, batch[-1].message_id))
        if events:
            log.info("slack.caught_up", channel=channel, messages=len(events))

    async def _missed_posts(
        self, channel: str, *, horizon: float, oldest: float
    ) -> tuple[dict[str, dict[str, Any]], set[str]]:
        """Top-level posts after ``oldest`` by ts, and the roots of threads replied to since.

        Read from the horizon, not the cursor: a reply during downtime in a thread whose
        root is older than the cursor shows only as that root's ``latest_reply`` (thread
        replies are not in the channel history), and the bot may never have engaged there.
        """
        found: dict[str, dict[str, Any]] = {}
        roots: set[str] = set()
        for msg in await self._pages("conversations_history", channel=channel,
                                     oldest=f"{horizon:.6f}"):
            ts = msg.get("ts")
            if not valid_ts(ts):
                continue
            if float(ts) > oldest:
                found[ts] = msg
            latest = msg.get("latest_reply")
            if valid_ts(latest) and float(latest) > oldest:
                roots.add(ts)
        return found, roots

    async def _pages(self, method: str, **params: Any) -> list[dict[str, Any]]:
        assert self.c.client is not None
        out: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(50):  # bounded: 50 pages of history_page_size
            call = getattr(self.c.client, method)
            resp = await call(limit=self.c.opts.history_page_size, cursor=cursor, **params)
            msgs = resp.get("messages")
            out.extend(m for m in (msgs if isinstance(msgs, list) else [])
                       if isinstance(m, dict))
            meta = resp.get("response_metadata")
            cursor = meta.get("next_cursor") if isinstance(meta, dict) else None
            if not cursor or not resp.get("has_more"):
                break
        return out

    async def _engaged_roots(self, channel: str) -> list[str]:
        roots = await self.c.intake.engaged_roots(
            "slack", self.c.team_id, channel, limit=self.c.opts.catch_up_max_threads)
        return [r for r in roots if valid_ts(r)]

    async def fetch_thread_history(self, event: InboundEvent) -> list[InboundEvent]:
        """Earlier messages of a thread the bot joins mid-way (``conversations.replies``).

        Only what the store has not recorded: recorded messages of the thread reach the
        prompt through the layer already, and must not appear twice.
        """
        if self.c.client is None or not valid_ts(event.thread_root):
            return []
        msgs = await self._pages("conversations_replies", channel=event.channel,
                                 ts=event.thread_root, latest=event.message_id,
                                 inclusive=False)
        found: list[InboundEvent] = []
        for msg in msgs:
            ev = self.c.convert(msg, channel=event.channel)
            if ev is not None and ev.message_id != event.message_id and not ev.is_edit:
                found.append(ev)
        found = found[-50:]
        if not found:
            return []
        known = await self.c.intake.known_keys([f.dedupe_key for f in found])
        return [f for f in found if f.dedupe_key not in known]

