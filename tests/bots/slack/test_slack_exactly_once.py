"""Slack exactly-once across crashes: kill the pipeline at each point between receipt and the
recorded final reply (in process: the fault seam raises a BaseException nothing may catch),
restart on the same store, and count what FakeSlack shows."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _harness import ANSWERED_POINTS, CRASH_POINTS, answering, crash_at, user_messages
from slack_helpers import (
    ALICE,
    CH,
    SlackStack,
    bot_messages,
    mention,
    settle,
    sid,
    slack_binding,
    visible,
    written,
)

from geode.providers.scripted import ScriptedProvider


@pytest.mark.parametrize("point", CRASH_POINTS)
async def test_crash_at_each_point_gives_exactly_one_final_reply(home: Path, fake, point):
    provider = ScriptedProvider([answering], repeat_last=True)
    hit, fault = crash_at(point)
    stack = SlackStack(home=home, fake=fake, provider=provider, bindings=[slack_binding()],
                       fault=fault)  # type: ignore[arg-type]
    try:
        await stack.start()
        root = await fake.user_posts(CH, mention("crash me"), user=ALICE)
        await asyncio.wait_for(hit.wait(), 10)
        await stack.crash()
        calls_before = len(provider.calls)

        stack.fault = None
        await stack.start()
        await fake.user_posts(CH, mention("after"), user=ALICE)
        await fake.wait_until(lambda: visible(fake, "answer to: crash me")
                              and visible(fake, "answer to: after"), within=15)

        async def settled() -> bool:
            row = await stack.layer.outbox.get(sid(root), "ev1")
            return row is not None and row.status == "sent"

        await settle(settled)
        # exactly one visible final reply for the message, in its thread, never posted twice
        # (re-editing the same message with the same text after a crash is idempotent)
        assert len({p.ts for p in written(fake, "answer to: crash me")}) == 1
        assert not [p for p in fake.posts if p.method == "chat.postMessage"
                    and p.text == "answer to: crash me"][1:]
        thread = [m["text"] for m in bot_messages(fake, CH, thread=root)]
        assert thread.count("answer to: crash me") == 1
        # the message entered the session once (not processed twice)
        restored = await stack.store.checkpointer(sid(root)).load()
        assert sum("crash me" in t for t in user_messages(restored.messages)) == 1
        if point in ANSWERED_POINTS:
            # the answer existed before the crash: recovered without asking the model again
            assert len(provider.calls) - calls_before == 2  # the "after" turn only
        if point == "recorded":
            # recorded but never acked: Slack redelivered it, and the store refused the copy
            assert any(attempt > 0 for _e, attempt in fake.deliveries)
        await fake.wait_until(lambda: not fake.unacked)
    finally:
        await stack.stop()
