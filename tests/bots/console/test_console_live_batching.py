"""A thread's live feed sends what one poll found as one chunk per viewer: fifty viewers of
a busy thread cost fifty writes a second, not fifty per timeline row (a reply records
several rows; ``benchmarks/bench_console.py`` measured 24 ms of CPU per reply with a write
per row and viewer). The chunk is rendered once for all viewers and written to each one's
socket directly (no task woken per viewer); a viewer whose socket does not keep up is cut
off instead of holding anything up."""

from __future__ import annotations

import asyncio
from typing import Any

from bots.console import live
from bots.console.live import Frame, ThreadFeed, ThreadFeeds, Viewer


class _Threads:
    """A store that has three new rows and a grown transcript at the first poll."""

    def __init__(self) -> None:
        self.polls = 0

    async def changes(self, session_id: str, *, after_id: int) -> tuple[int, list[Any]]:
        self.polls += 1
        if self.polls > 1:
            return 4, []
        return 4, [{"id": i, "turn_id": "t1", "kind": f"k{i}", "payload": {},
                    "created_at": "now"} for i in (1, 2, 3)]


class _Transport:
    """A viewer's socket: what was written to it, and how much waits in its buffer."""

    def __init__(self, *, backlog: int = 0) -> None:
        self.written: list[bytes] = []
        self.backlog = backlog
        self.closing = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return self.backlog

    def abort(self) -> None:
        self.aborted = self.closing = True


def _viewer(transport: _Transport, *, chunked: bool = False) -> Viewer:
    v = Viewer(transport=transport, chunked=chunked,  # type: ignore[arg-type]
               done=asyncio.get_running_loop().create_future())
    assert v.caught_up()
    return v


async def _one_poll(feed: ThreadFeed) -> None:
    task = asyncio.create_task(feed.run())
    await asyncio.sleep(0.1)
    feed.viewers.clear()
    await asyncio.wait_for(task, 5)


async def test_one_poll_is_one_chunk_per_viewer(monkeypatch: Any) -> None:
    monkeypatch.setattr(live, "LIVE_POLL_S", 0.01)
    feed = ThreadFeed(session_id="s", threads=_Threads(), after_id=0,  # type: ignore[arg-type]
                      count=2)
    sockets = [_Transport() for _ in range(50)]
    feed.viewers.update(_viewer(s) for s in sockets)
    await _one_poll(feed)
    for socket in sockets:
        assert len(socket.written) == 1
        text = socket.written[0].decode()
        assert text.count("event: timeline") == 3 and text.count("event: messages") == 1
        assert text.index("id: 1\n") < text.index("id: 2\n") < text.index("id: 3\n")
    assert feed.after_id == 3 and feed.count == 4
    # rendered once for all fifty, the very same bytes handed to each socket
    assert feed.renders == 1
    assert len({id(s.written[0]) for s in sockets}) == 1


async def test_a_chunked_stream_gets_the_chunk_framed_once(monkeypatch: Any) -> None:
    monkeypatch.setattr(live, "LIVE_POLL_S", 0.01)
    feed = ThreadFeed(session_id="s", threads=_Threads(), after_id=0,  # type: ignore[arg-type]
                      count=2)
    plain, chunked = _Transport(), _Transport()
    feed.viewers.update({_viewer(plain), _viewer(chunked, chunked=True)})
    await _one_poll(feed)
    [body], [framed] = plain.written, chunked.written
    assert framed == b"%x\r\n" % len(body) + body + b"\r\n"


async def test_a_slow_viewer_is_cut_off_and_the_others_are_served(monkeypatch: Any) -> None:
    monkeypatch.setattr(live, "LIVE_POLL_S", 0.01)
    feed = ThreadFeed(session_id="s", threads=_Threads(), after_id=0,  # type: ignore[arg-type]
                      count=2)
    fast, slow = _Transport(), _Transport(backlog=live.VIEWER_BACKLOG_BYTES + 1)
    quick, stuck = _viewer(fast), _viewer(slow)
    feed.viewers.update({quick, stuck})
    task = asyncio.create_task(feed.run())
    await asyncio.wait_for(stuck.done, 5)  # its stream ends: the browser reconnects
    assert slow.aborted and slow.written == [] and stuck not in feed.viewers
    assert len(fast.written) == 1 and not quick.done.done()
    feed.viewers.clear()
    await asyncio.wait_for(task, 5)


async def test_a_viewer_joining_gets_the_feeds_events_after_its_catch_up() -> None:
    socket = _Transport()
    v = Viewer(transport=socket, chunked=False,  # type: ignore[arg-type]
               done=asyncio.get_running_loop().create_future())
    assert v.send(Frame.of(b"new"))  # the feed's, while the viewer's catch-up is written
    assert socket.written == []
    socket.write(b"missed")  # what the catch-up wrote
    assert v.caught_up()
    assert socket.written == [b"missed", b"new"]


async def test_a_viewer_that_left_is_noticed_on_a_quiet_thread(monkeypatch: Any) -> None:
    monkeypatch.setattr(live, "LIVE_POLL_S", 0.01)
    threads = _Threads()
    threads.polls = 1  # nothing new to send
    feeds = ThreadFeeds()
    socket = _Transport()
    v = _viewer(socket)
    feed = feeds.watch(ThreadFeed(session_id="s", threads=threads,  # type: ignore[arg-type]
                                  after_id=0, count=4), v)
    socket.closing = True  # the browser closed the tab
    await asyncio.wait_for(v.done, 5)
    assert feed.task is not None
    await asyncio.wait_for(feed.task, 5)
    assert feeds.feeds == {} and feeds.renders == 0
