"""Live updates of a thread page: server-sent events (``GET /threads/KEY/events``).

One :class:`ThreadFeed` per thread that has viewers polls the store (the session's new
timeline rows and its message count) and fans what it found out to every viewer, one chunk
per poll: fifty viewers of one thread cost one query a second and fifty writes (however
many rows the turns recorded), and a thread nobody watches costs nothing.
The feed stops with its last viewer. A reply never waits for the console: the feed reads
what the turn committed, it is not on the turn's path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import structlog
from aiohttp import web

from bots.console.app import ACCESS, DEPS_KEY, IDENTITY, refuse

if TYPE_CHECKING:
    from bots.store import ConsoleThreads

__all__ = ["FEEDS_KEY", "LIVE_POLL_S", "ThreadFeed", "ThreadFeeds", "thread_events"]

log = structlog.get_logger(__name__)

#: how often a watched thread's feed reads the store
LIVE_POLL_S = 1.0
#: a comment line this often keeps proxies from closing an idle stream
KEEPALIVE_S = 15.0
#: events a slow viewer may have waiting before it is dropped (it reconnects)
VIEWER_BACKLOG = 500


_NO_ROW = 2**62


def timeline_frame(row: dict[str, Any]) -> str:
    """A timeline row as an event (its id: a reconnecting browser resumes after it)."""
    return f"id: {row['id']}\nevent: timeline\ndata: {json.dumps(row, default=str)}\n\n"


@dataclass(eq=False)
class ThreadFeed:
    """The poller of one session, shared by its viewers."""

    session_id: str
    threads: ConsoleThreads
    after_id: int
    count: int
    viewers: set[asyncio.Queue[bytes | None]] = field(default_factory=set)
    task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        while self.viewers:
            try:
                count, rows = await self.threads.changes(self.session_id,
                                                         after_id=self.after_id)
            except Exception:  # the store is down: the viewers keep waiting
                log.warning("console.feed_failed", session_id=self.session_id, exc_info=True)
                count, rows = self.count, []
            frames = []
            for row in rows:
                self.after_id = max(self.after_id, int(row["id"]))
                frames.append(timeline_frame(row))
            if count != self.count:
                self.count = count
                frames.append(f"event: messages\ndata: {json.dumps({'count': count})}\n\n")
            if frames:
                self._send("".join(frames).encode())
            await asyncio.sleep(LIVE_POLL_S)

    def _send(self, chunk: bytes) -> None:
        """One poll's events to every viewer, as one chunk encoded once: a viewer costs one
        write per poll that found something, however many rows the turns recorded."""
        for queue in list(self.viewers):
            if queue.qsize() >= VIEWER_BACKLOG:
                self.viewers.discard(queue)
                queue.put_nowait(None)  # too slow: its stream ends, the browser reconnects
            else:
                queue.put_nowait(chunk)


@dataclass
class ThreadFeeds:
    """The feeds of the threads being watched now."""

    feeds: dict[str, ThreadFeed] = field(default_factory=dict)

    def watch(self, feed: ThreadFeed, queue: asyncio.Queue[bytes | None]) -> ThreadFeed:
        current = self.feeds.setdefault(feed.session_id, feed)
        current.viewers.add(queue)
        if current.task is None or current.task.done():
            current.task = asyncio.get_running_loop().create_task(self._run(current))
        return current

    async def _run(self, feed: ThreadFeed) -> None:
        try:
            await feed.run()
        finally:
            if self.feeds.get(feed.session_id) is feed and not feed.viewers:
                del self.feeds[feed.session_id]

    def leave(self, feed: ThreadFeed, queue: asyncio.Queue[bytes | None]) -> None:
        feed.viewers.discard(queue)

    async def close(self) -> None:
        """End every stream (the console stops)."""
        for feed in list(self.feeds.values()):
            for queue in list(feed.viewers):
                queue.put_nowait(None)
            feed.viewers.clear()
            if feed.task is not None:
                feed.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await feed.task
        self.feeds.clear()


FEEDS_KEY = web.AppKey("feeds", ThreadFeeds)


async def thread_events(request: web.Request) -> web.StreamResponse:
    """The thread's events from now on: ``timeline`` (a new timeline row) and ``messages``
    (the transcript grew: the page offers to reload it)."""
    from bots.store import ConsoleThreads

    deps = request.app[DEPS_KEY]
    who, access = request[IDENTITY], request[ACCESS]
    threads = ConsoleThreads(store=deps.store)
    t = await threads.get(unquote(request.match_info["key"]))
    if t is None or not access.sees_channel(who, t.platform, t.workspace, t.channel):
        return refuse(request, 404, "No such thread (or not one of your bindings).")
    given = request.headers.get("Last-Event-ID", "") or request.query.get("after", "")
    after = int(given) if given.isdigit() else 0
    # the message count now (no row is after the largest id)
    count, _ = await threads.changes(t.session_id, after_id=_NO_ROW)
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-store",
        "X-Accel-Buffering": "no"})
    try:
        await response.prepare(request)
    except ConnectionResetError:  # the browser left (a navigation) before the stream began
        return response
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()
    feeds = request.app[FEEDS_KEY]
    feed = feeds.watch(ThreadFeed(session_id=t.session_id, threads=threads, after_id=after,
                                  count=count), queue)
    try:
        await response.write(b": live\n\n")
        if after < feed.after_id:  # joined a running feed: the rows it passed already
            _count, missed = await threads.changes(t.session_id, after_id=after)
            for row in missed:
                if int(row["id"]) <= feed.after_id:
                    await response.write(timeline_frame(row).encode())
        while True:
            try:
                chunk = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
            except TimeoutError:
                chunk = b": keepalive\n\n"
            if chunk is None:
                break
            await response.write(chunk)
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        feeds.leave(feed, queue)
    return response
