"""Live updates of a thread page: server-sent events (``GET /threads/KEY/events``).

One :class:`ThreadFeed` per thread that has viewers polls the store (the session's new
timeline rows and its message count) and fans what it found out to every viewer. What a
poll found is rendered once: each row's JSON, the event frames, and their bytes (as they go
on the wire, chunk framing included) are built once per poll, however many viewers there
are, and the same bytes are handed to each viewer's socket without waiting on it (a
:class:`Viewer` is its connection's transport; the kernel and the event loop's buffer do
the rest). A viewer whose socket does not keep up (more than :data:`VIEWER_BACKLOG_BYTES`
waiting) is cut off; its browser reconnects and resumes after the last event it saw
(``Last-Event-ID``). Fifty viewers of one thread thus cost one store read a second and, per
poll that found something, one render and fifty socket writes; a thread nobody watches
costs nothing (no feed, no read, no render).

The feed stops with its last viewer. A reply never waits for the console: the feed reads
what the turn committed, it is not on the turn's path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import structlog
from aiohttp import HttpVersion11, web

from bots.console.app import ACCESS, DEPS_KEY, IDENTITY, refuse

if TYPE_CHECKING:
    from bots.store import ConsoleThreads

__all__ = ["FEEDS_KEY", "LIVE_POLL_S", "Frame", "ThreadFeed", "ThreadFeeds", "Viewer",
           "thread_events"]

log = structlog.get_logger(__name__)

#: how often a watched thread's feed reads the store
LIVE_POLL_S = 1.0
#: a comment line this often keeps proxies from closing an idle stream
KEEPALIVE_S = 15.0
#: bytes a slow viewer may have waiting in its socket's buffer before it is cut off (it
#: reconnects and resumes)
VIEWER_BACKLOG_BYTES = 1 << 20


_NO_ROW = 2**62


def timeline_frame(row: dict[str, Any]) -> str:
    """A timeline row as an event (its id: a reconnecting browser resumes after it)."""
    return f"id: {row['id']}\nevent: timeline\ndata: {json.dumps(row, default=str)}\n\n"


@dataclass(frozen=True, slots=True)
class Frame:
    """Events as they go on the wire, encoded once for every viewer: the bytes of an
    HTTP/1.1 chunked response (aiohttp's framing of a stream without a length) and the
    plain bytes (an HTTP/1.0 client's stream, which has no chunks)."""

    plain: bytes
    chunked: bytes

    @classmethod
    def of(cls, data: bytes) -> Frame:
        return cls(plain=data, chunked=b"%x\r\n%s\r\n" % (len(data), data))


KEEPALIVE = Frame.of(b": keepalive\n\n")


@dataclass(eq=False, kw_only=True)
class Viewer:
    """One browser's stream, written to by its feed without a task or an await per event.

    Until the stream has caught up with the rows the feed sent before it joined
    (:meth:`caught_up`), what the feed sends waits here, so that the browser sees the
    rows in order.
    """

    transport: asyncio.Transport
    chunked: bool
    #: resolved when the stream ends (the viewer left, was too slow, or the console stops)
    done: asyncio.Future[None]
    held: list[Frame] | None = field(default_factory=list)

    def send(self, frame: Frame) -> bool:
        """Hand ``frame`` to the socket; False when the viewer is gone or too slow."""
        if self.held is not None:
            self.held.append(frame)
            return True
        t = self.transport
        if t.is_closing() or t.get_write_buffer_size() > VIEWER_BACKLOG_BYTES:
            return False
        t.write(frame.chunked if self.chunked else frame.plain)
        return True

    def caught_up(self) -> bool:
        """The rows before the feed's are written: send what waited, and from now on write
        directly. False when the viewer is gone."""
        held, self.held = self.held or [], None
        return all(self.send(f) for f in held)

    @property
    def gone(self) -> bool:
        return self.transport.is_closing()

    def end(self, *, cut: bool = False) -> None:
        """End the stream: ``cut`` closes the connection at once (a viewer too slow: what
        waits in its buffer would only delay it; it reconnects and resumes)."""
        if cut:
            self.transport.abort()
        if not self.done.done():
            self.done.set_result(None)


@dataclass(eq=False)
class ThreadFeed:
    """The poller of one session, shared by its viewers."""

    session_id: str
    threads: ConsoleThreads
    after_id: int
    count: int
    viewers: set[Viewer] = field(default_factory=set)
    task: asyncio.Task[None] | None = None
    #: polls whose events were rendered (built and encoded once, for every viewer)
    renders: int = 0
    _last_sent: float = field(default_factory=time.monotonic)

    async def run(self) -> None:
        while self.viewers:
            try:
                count, rows = await self.threads.changes(self.session_id,
                                                         after_id=self.after_id)
            except Exception:  # the store is down: the viewers keep waiting
                log.warning("console.feed_failed", session_id=self.session_id, exc_info=True)
                count, rows = self.count, []
            if rows or count != self.count:
                self._send(self._render(count, rows))
            elif time.monotonic() - self._last_sent >= KEEPALIVE_S:
                self._send(KEEPALIVE)
            else:  # nothing to say: only notice the viewers that left
                for viewer in [v for v in self.viewers if v.gone]:
                    self._drop(viewer)
            await asyncio.sleep(LIVE_POLL_S)

    def _render(self, count: int, rows: list[dict[str, Any]]) -> Frame:
        """One poll's events as one frame: a viewer costs one write per poll that found
        something, however many rows the turns recorded."""
        self.renders += 1
        frames = []
        for row in rows:
            self.after_id = max(self.after_id, int(row["id"]))
            frames.append(timeline_frame(row))
        if count != self.count:
            self.count = count
            frames.append(f"event: messages\ndata: {json.dumps({'count': count})}\n\n")
        return Frame.of("".join(frames).encode())

    def _send(self, frame: Frame) -> None:
        self._last_sent = time.monotonic()
        for viewer in list(self.viewers):
            if not viewer.send(frame):
                self._drop(viewer, cut=not viewer.gone)

    def _drop(self, viewer: Viewer, *, cut: bool = False) -> None:
        self.viewers.discard(viewer)
        viewer.end(cut=cut)


@dataclass
class ThreadFeeds:
    """The feeds of the threads being watched now."""

    feeds: dict[str, ThreadFeed] = field(default_factory=dict)
    #: renders of the feeds that ended (with :attr:`renders`: the console's work so far)
    _ended_renders: int = 0

    @property
    def renders(self) -> int:
        """Polls rendered so far by every feed, ended ones included (none while nobody
        watches)."""
        return self._ended_renders + sum(f.renders for f in self.feeds.values())

    def watch(self, feed: ThreadFeed, viewer: Viewer) -> ThreadFeed:
        current = self.feeds.setdefault(feed.session_id, feed)
        current.viewers.add(viewer)
        if current.task is None or current.task.done():
            current.task = asyncio.get_running_loop().create_task(self._run(current))
        return current

    async def _run(self, feed: ThreadFeed) -> None:
        try:
            await feed.run()
        finally:
            if self.feeds.get(feed.session_id) is feed and not feed.viewers:
                del self.feeds[feed.session_id]
                self._ended_renders += feed.renders

    def leave(self, feed: ThreadFeed, viewer: Viewer) -> None:
        feed.viewers.discard(viewer)

    async def close(self) -> None:
        """End every stream (the console stops)."""
        for feed in list(self.feeds.values()):
            for viewer in list(feed.viewers):
                viewer.end()
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
    # the feed frames its chunks itself (encoded once for all viewers), so the framing is
    # decided here rather than left to aiohttp: chunked on HTTP/1.1, plain on HTTP/1.0
    chunked = request.version >= HttpVersion11
    if chunked:
        response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        await response.write(b": live\n\n")  # the headers go out with it
    except ConnectionResetError:  # the browser left (a navigation) before the stream began
        return response
    transport = request.transport
    if transport is None or transport.is_closing():
        return response
    viewer = Viewer(transport=transport, chunked=chunked,
                    done=asyncio.get_running_loop().create_future())
    feeds = request.app[FEEDS_KEY]
    feed = feeds.watch(ThreadFeed(session_id=t.session_id, threads=threads, after_id=after,
                                  count=count), viewer)
    try:
        if after < feed.after_id:  # joined a running feed: the rows it passed already
            _count, missed = await threads.changes(t.session_id, after_id=after)
            for row in missed:
                if int(row["id"]) <= feed.after_id:
                    await response.write(timeline_frame(row).encode())
        if viewer.caught_up():
            await viewer.done
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        feeds.leave(feed, viewer)
    return response
