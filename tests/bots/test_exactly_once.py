"""Exactly-once across crashes: kill the pipeline at each point between receipt and the
recorded final reply, restart on the same store, and count what the fake Telegram saw."""

from __future__ import annotations

import asyncio

import pytest
from _harness import ANSWERED_POINTS, CRASH_POINTS, answering, crash_at

from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import CHAT, finals, user_messages

__all__ = ["answering", "crash_at"]  # test_pg.py runs the same crashes on PostgreSQL


@pytest.mark.parametrize("point", CRASH_POINTS)
async def test_crash_at_each_point_gives_exactly_one_final_reply(make_stack, fake, point):
    provider = ScriptedProvider([answering], repeat_last=True)
    hit, fault = crash_at(point)
    stack = make_stack(provider=provider, fault=fault)
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot crash me", from_user=42))
    await asyncio.wait_for(hit.wait(), 10)
    await stack.crash()
    calls_before = len(provider.calls)

    stack.fault = None
    await stack.start()
    fake.user_says(CHAT, "@geode_bot after", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: crash me")
                          and finals(fake, "answer to: after"), within=15)
    sid = f"telegram:123456:{CHAT}:{mid}"
    layer = stack.connector.layer

    async def settled() -> bool:
        row = await layer.outbox.get(sid, "ev1")
        return row is not None and row.status == "sent"

    for _ in range(200):
        if await settled():
            break
        await asyncio.sleep(0.02)
    assert await settled()
    # exactly one visible final reply for the message, and no second copy was ever sent
    assert len(finals(fake, "answer to: crash me")) == 1
    visible = [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)]
    assert visible.count("answer to: crash me") == 1
    # the message entered the session once (not processed twice)
    restored = await stack.store.checkpointer(sid).load()
    assert sum("crash me" in t for t in user_messages(restored.messages)) == 1
    if point in ANSWERED_POINTS:
        # the answer existed before the crash: recovered without asking the model again
        assert len(provider.calls) - calls_before == 2  # only the "after" turn (tool + answer)
