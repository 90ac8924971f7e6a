"""A thread's live feed sends what one poll found as one chunk per viewer: fifty viewers of
a busy thread cost fifty writes a second, not fifty per timeline row (a reply records
several rows; ``benchmarks/bench_console.py`` measured 24 ms of CPU per reply with a write
per row and viewer)."""

from __future__ import annotations

import asyncio
from typing import Any

from bots.console import live
from bots.console.live import ThreadFeed


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


async def test_one_poll_is_one_chunk_per_viewer(monkeypatch: Any) -> None:
    monkeypatch.setattr(live, "LIVE_POLL_S", 0.01)
    feed = ThreadFeed(session_id="s", threads=_Threads(), after_id=0,  # type: ignore[arg-type]
                      count=2)
    viewers: list[asyncio.Queue[bytes | None]] = [asyncio.Queue() for _ in range(50)]
    feed.viewers.update(viewers)
    task = asyncio.create_task(feed.run())
    await asyncio.sleep(0.1)
    feed.viewers.clear()
    await asyncio.wait_for(task, 5)
    for queue in viewers:
        assert queue.qsize() == 1
        chunk = queue.get_nowait()
        assert isinstance(chunk, bytes)
        text = chunk.decode()
        assert text.count("event: timeline") == 3 and text.count("event: messages") == 1
        assert text.index("id: 1\n") < text.index("id: 2\n") < text.index("id: 3\n")
    assert feed.after_id == 3 and feed.count == 4
