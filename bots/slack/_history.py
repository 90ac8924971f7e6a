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
from typing import TYPE_CHECKING, Any

import structlog
from slack_sdk.errors import SlackApiError
from sqlalchemy import select

from bots._tables import events_table, threads_table
from bots.events import InboundEvent
from bots.slack._convert import valid_ts

if TYPE_CHECKING:
    from bots.slack.connector import SlackConnector

__all__ = ["SlackHistory"]

log = structlog.get_logger(__name__)


class SlackHistory:
    """History reads of one connector."""

    def __init__(self, *, connector: SlackConnector) -> None:
        self.c = connector

    async def catch_up(self) -> None:
        """Record what bound channels got while nobody listened (history from the cursor)."""
        for b in self.c.bound_channels():
            try:
                await self._catch_up_channel(b.channel)
            except Exception:
                log.warning("slack.catch_up_failed", channel=b.channel, exc_info=True)

    async def _catch_up_channel(self, channel: str) -> None:
        assert self.c.layer is not None and self.c.client is not None
        name = self.c.cursor_name(channel)
        since = self.c.catch_up_from.pop(channel, None)
        if since is None:
            since = await self.c.layer.inbound.cursors.get(name)
        now = time.time()
        if since is None or not valid_ts(since):
            # First contact with this channel: its past is not ours to answer.
            async with self.c.layer.store.write() as conn:
                await self.c.layer.inbound.cursors.put(conn, name, f"{now:.6f}")
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
        assert self.c.layer is not None
        t = threads_table
        async with self.c.layer.store.read() as conn:
            rows = (await conn.execute(
                select(t.c.thread_root).where(
                    t.c.platform == "slack", t.c.workspace == self.c.team_id,
                    t.c.channel == channel, t.c.engaged.is_(True),
                ).order_by(t.c.created_at.desc()).limit(self.c.opts.catch_up_max_threads))).all()
        return [str(r.thread_root) for r in rows if valid_ts(str(r.thread_root))]

    async def fetch_thread_history(self, event: InboundEvent) -> list[InboundEvent]:
        """Earlier messages of a thread the bot joins mid-way (``conversations.replies``).

        Only what the store has not recorded: recorded messages of the thread reach the
        prompt through the layer already, and must not appear twice.
        """
        if self.c.client is None or self.c.layer is None or not valid_ts(event.thread_root):
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
        e = events_table
        async with self.c.layer.store.read() as conn:
            known = {str(r.dedupe_key) for r in (await conn.execute(
                select(e.c.dedupe_key).where(e.c.dedupe_key.in_([f.dedupe_key for f in found]))
            )).all()}
        return [f for f in found if f.dedupe_key not in known]

