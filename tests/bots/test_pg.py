"""The channel layer on PostgreSQL (the shared, multi-replica store): the happy path,
exactly-once across crashes, and two replicas on one token (one poller).

``pg_store_url`` comes first in each signature: set up first, it is torn down last, after
the daemons closed their connections (its DROP SCHEMA would wait on their locks)."""

from __future__ import annotations

import asyncio

import pytest
from test_exactly_once import answering, crash_at

from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import CHAT, finals, user_messages


async def test_pg_bound_mention_gets_one_reply_and_restarts_keep_the_session(
    pg_store_url, make_stack, fake
):
    stack = make_stack(store_url=pg_store_url)
    await stack.start()
    assert stack.store.is_postgres
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot on postgres", from_user=42))
    fake.user_says(CHAT, "@geode_bot stranger", from_user=99)
    await fake.wait_until(lambda: finals(fake, "answer to: on postgres"), within=15)
    await fake.wait_until(lambda: any("Pairing code" in s.plain_text for s in fake.sent),
                          within=15)
    assert len(stack.provider.calls) == 1
    await stack.stop()
    await stack.start()
    reply = fake.messages_in(CHAT, from_bot=True)[0].message_id
    fake.user_says(CHAT, "follow-up", from_user=42, reply_to=reply)
    await fake.wait_until(lambda: finals(fake, "answer to: follow-up"), within=15)
    restored = await stack.store.checkpointer(f"telegram:123456:{CHAT}:{mid}").load()
    assert [t.rsplit("): ", 1)[-1] for t in user_messages(restored.messages)] == [
        "on postgres", "follow-up"]
    assert len(finals(fake, "answer to: on postgres")) == 1


@pytest.mark.parametrize("point", ["turn_accepted", "tool_call", "final_edited_before_record"])
async def test_pg_crash_then_restart_is_exactly_once(pg_store_url, make_stack, fake, point):
    provider = ScriptedProvider([answering], repeat_last=True)
    hit, fault = crash_at(point)
    stack = make_stack(provider=provider, fault=fault, store_url=pg_store_url)
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot crash me", from_user=42))
    await asyncio.wait_for(hit.wait(), 15)
    await stack.crash()
    stack.fault = None
    await stack.start()
    fake.user_says(CHAT, "@geode_bot after", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: crash me")
                          and finals(fake, "answer to: after"), within=20)
    await asyncio.sleep(0.3)
    assert len(finals(fake, "answer to: crash me")) == 1
    restored = await stack.store.checkpointer(f"telegram:123456:{CHAT}:{mid}").load()
    assert sum("crash me" in t for t in user_messages(restored.messages)) == 1


async def test_pg_two_replicas_one_poller(pg_store_url, make_stack, fake, home):
    first = make_stack(store_url=pg_store_url)
    c1 = await first.start()
    home2 = home / "replica2"
    home2.mkdir()
    second = make_stack(store_url=pg_store_url)
    second.home = home2
    c2 = await second.start()
    await fake.wait_until(lambda: c2.standby, within=10)
    for i in range(3):
        fake.user_says(CHAT, f"@geode_bot q{i}", from_user=42)
    await fake.wait_until(lambda: all(finals(fake, f"answer to: q{i}") for i in range(3)),
                          within=15)
    assert all(len(finals(fake, f"answer to: q{i}")) == 1 for i in range(3))
    assert c2.polls == 0 and c1.polls > 0
    assert all(c.status == 200 for c in fake.calls_to("getUpdates"))
