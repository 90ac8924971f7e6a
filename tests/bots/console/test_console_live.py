"""A thread page follows its thread live (server-sent events): new timeline rows and a
grown transcript reach every viewer, through one poller per watched thread."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from bots.console import live
from geode.messages import Message
from tests.bots.console.conftest import ALICE, BOB, Console
from tests.bots.console.test_console_pages import _thread

pytestmark = pytest.mark.timeout(60)


async def _next_event(stream: Any) -> tuple[str, dict[str, Any]]:
    event, data = "", ""
    while True:
        line = (await asyncio.wait_for(stream.content.readline(), 10)).decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "" and event:
            return event, json.loads(data)


async def test_viewers_get_new_rows_and_messages_from_one_feed(
        console: Console, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "LIVE_POLL_S", 0.05)
    sid = await _thread(console, "-1001", "10", "notes")
    await console.store.timeline.append(session_id=sid, turn_id="t0", kind="old.row")
    alice = await console.sign_in(ALICE)
    page = await alice.json(f"/threads/{sid}")
    url = page[1]["events_url"]
    first = await alice.client.get(url)
    second = await alice.client.get(url)
    assert first.status == 200 and first.headers["Content-Type"] == "text/event-stream"
    await console.store.timeline.append(session_id=sid, turn_id="t1", kind="tool.call",
                                        payload={"tool": "read_file"})
    for stream in (first, second):
        event, row = await _next_event(stream)
        assert (event, row["kind"], row["payload"]) == ("timeline", "tool.call",
                                                       {"tool": "read_file"})
    await console.store.checkpointer(sid).save(messages=[Message.user("hi")], state={},
                                               status="active", turn_id="t1")
    event, data = await _next_event(first)
    assert (event, data) == ("messages", {"count": 1})
    # both viewers were served by one poller of the store
    feeds = next(iter(alice.client.server.app[live.FEEDS_KEY].feeds.values()), None)
    assert feeds is not None and len(feeds.viewers) == 2
    first.close()
    second.close()


async def test_another_bindings_thread_streams_nothing(console: Console) -> None:
    sid = await _thread(console, "-1002", "12", "bob's")
    alice = await console.sign_in(ALICE)
    r = await alice.client.get(f"/threads/{sid}/events", headers={"Accept": "application/json"})
    assert r.status == 404
    bob = await console.sign_in(BOB)
    r = await bob.client.get(f"/threads/{sid}/events")
    assert r.status == 200
    r.close()


async def test_nothing_is_rendered_for_a_thread_nobody_watches_and_once_for_fifty(
        console: Console, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "LIVE_POLL_S", 0.05)
    sid = await _thread(console, "-1001", "10", "notes")
    alice = await console.sign_in(ALICE)
    feeds = alice.client.server.app[live.FEEDS_KEY]
    for i in range(5):  # a turn records rows: nobody watches
        await console.store.timeline.append(session_id=sid, turn_id=f"t{i}", kind="tool.call")
    await asyncio.sleep(0.3)
    assert feeds.renders == 0 and feeds.feeds == {}
    url = (await alice.json(f"/threads/{sid}"))[1]["events_url"]
    streams = [await alice.client.get(url) for _ in range(50)]
    async with asyncio.timeout(10):
        while sum(len(f.viewers) for f in feeds.feeds.values()) < 50:
            await asyncio.sleep(0.01)
    assert len(feeds.feeds) == 1  # one feed for the fifty
    await console.store.timeline.append(session_id=sid, turn_id="t9", kind="tool.result",
                                        payload={"n": 9})
    for stream in streams:
        event, row = await _next_event(stream)
        assert (event, row["payload"]) == ("timeline", {"n": 9})
    assert feeds.renders == 1  # one render for the fifty viewers
    for stream in streams:
        stream.close()
    async with asyncio.timeout(10):  # the last viewer gone, the feed stops
        while feeds.feeds:
            await asyncio.sleep(0.05)
    assert feeds.renders == 1
