"""Exactly-once and no-loss for Discord: crash points, catch-up after downtime, gateway
drops (RESUME) and invalidated sessions (re-IDENTIFY + catch-up)."""

from __future__ import annotations

import asyncio

import pytest
from _discord_stack import (  # noqa: F401  (fixtures)
    dfake,
    make_dstack,
    said,
    sid,
    texts_in,
    visible_everywhere,
    wait_shown,
)
from _harness import ANSWERED_POINTS, CRASH_POINTS, answering, crash_at

from geode.providers.scripted import ScriptedProvider

POINTS = [p for p in CRASH_POINTS if p != "progress_started"]


@pytest.mark.parametrize("point", POINTS)
async def test_crash_at_each_point_gives_exactly_one_final_reply(make_dstack, dfake, point):  # noqa: F811 (fixtures)
    provider = ScriptedProvider([answering], repeat_last=True)
    hit, fault = crash_at(point)
    stack = make_dstack(provider=provider, fault=fault)
    await stack.start()
    mid = await dfake.user_says(dfake.channel_id, "crash me", mention_bot=True)
    await asyncio.wait_for(hit.wait(), 10)
    await stack.crash()
    calls_before = len(provider.calls)
    stack.fault = None
    await stack.start()
    await dfake.user_says(dfake.channel_id, "after", mention_bot=True)
    await wait_shown(dfake, "answer to: crash me", timeout=15)
    await wait_shown(dfake, "answer to: after", timeout=15)
    layer = stack.connector.layer
    for _ in range(200):
        row = await layer.outbox.get(sid(dfake, mid), "ev1")
        if row is not None and row.status == "sent":
            break
        await asyncio.sleep(0.02)
    assert row is not None and row.status == "sent"
    # exactly one visible final reply, never a second message carrying it
    assert visible_everywhere(dfake, "answer to: crash me") == 1
    assert [s for s in dfake.sent if s.content == "answer to: crash me"] == []
    restored = await stack.store.checkpointer(sid(dfake, mid)).load()
    assert said(restored.messages).count("crash me") == 1
    if point in ANSWERED_POINTS:
        assert len(provider.calls) - calls_before == 2  # only the "after" turn


async def test_catch_up_of_messages_posted_while_down(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack = make_dstack()
    await stack.start()
    root = await dfake.user_says(dfake.channel_id, "before", mention_bot=True)
    await wait_shown(dfake, "answer to: before")
    await stack.stop()
    # while down: a new mention in the channel, and a follow-up in the active thread
    await dfake.user_says(dfake.channel_id, "while down", mention_bot=True)
    await dfake.user_says(dfake.channel_id, "in thread while down", thread_id=root)
    await stack.start()
    await wait_shown(dfake, "answer to: while down")
    await wait_shown(dfake, "answer to: in thread while down")
    # and nothing older is replayed (the original peer re-answered its last 5 on restart)
    await asyncio.sleep(0.3)
    assert visible_everywhere(dfake, "answer to: before") == 1
    assert len(stack.provider.calls) == 3
    restored = await stack.store.checkpointer(sid(dfake, root)).load()
    assert said(restored.messages) == ["before", "in thread while down"]


async def test_gateway_drop_mid_turn_resumes_without_loss_or_duplicates(make_dstack, dfake):  # noqa: F811 (fixtures)
    started, release = asyncio.Event(), asyncio.Event()

    class Slow(ScriptedProvider):
        async def complete(self, request):
            self.calls.append(request)
            if len(self.calls) == 1:
                started.set()
                await release.wait()
            text = request.messages[-1].text.rsplit("): ", 1)[-1]
            return self._to_response(f"answer to: {text}", request.model)

    stack = make_dstack(provider=Slow())
    await stack.start()
    root = await dfake.user_says(dfake.channel_id, "long", mention_bot=True)
    await asyncio.wait_for(started.wait(), 10)
    identifies = dfake.identifies
    dfake.hold_gateway()
    await dfake.drop_connection()
    # posted while the gateway is down: only a RESUME replay can deliver these
    await dfake.user_says(dfake.channel_id, "during drop", thread_id=root)
    other = await dfake.user_says(dfake.channel_id, "new during drop", mention_bot=True)
    dfake.release_gateway()
    await dfake.wait_for(lambda: dfake.resumes >= 1, timeout=10)
    release.set()
    await wait_shown(dfake, "answer to: long")
    await wait_shown(dfake, "answer to: during drop")
    await wait_shown(dfake, "answer to: new during drop")
    assert dfake.identifies == identifies  # resumed, not re-identified
    assert any(c["path"] == "/resume-gateway" for c in dfake.connections)
    await asyncio.sleep(0.3)
    for text in ("answer to: long", "answer to: during drop", "answer to: new during drop"):
        assert visible_everywhere(dfake, text) == 1
    assert len(stack.provider.calls) == 3
    restored = await stack.store.checkpointer(sid(dfake, root)).load()
    assert said(restored.messages) == ["long", "during drop"]
    assert said((await stack.store.checkpointer(sid(dfake, other)).load()).messages) == [
        "new during drop"]


async def test_invalid_session_reidentifies_and_catches_up(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack = make_dstack()
    await stack.start()
    root = await dfake.user_says(dfake.channel_id, "first", mention_bot=True)
    await wait_shown(dfake, "answer to: first")
    identifies = dfake.identifies
    dfake.hold_gateway()
    await dfake.drop_connection()
    dfake.expire_sessions()  # the RESUME will get INVALID_SESSION: these are never replayed
    await dfake.user_says(dfake.channel_id, "lost to the gateway", thread_id=root)
    await dfake.user_says(dfake.channel_id, "also lost", mention_bot=True)
    dfake.release_gateway()
    await dfake.wait_for(lambda: dfake.identifies > identifies, timeout=15)
    await wait_shown(dfake, "answer to: lost to the gateway", timeout=15)
    await wait_shown(dfake, "answer to: also lost", timeout=15)
    await asyncio.sleep(0.3)
    assert visible_everywhere(dfake, "answer to: lost to the gateway") == 1
    assert visible_everywhere(dfake, "answer to: first") == 1
    assert len(stack.provider.calls) == 3
    assert texts_in(dfake, root) == ["answer to: first", "answer to: lost to the gateway"]
