"""A recovered turn keeps ONE placeholder: the progress message it sent before the crash is
reused (edited to say the turn resumed, then into the answer), never left frozen beside a
second one.

The intent to send the progress message is recorded with the turn's row, before the send;
its id after. A crash between the send and the id's record leaves an intent without an id:
on Slack (which reads the thread back) the recovered turn finds its placeholder and reuses
it; on Telegram (no history API) it sends a new one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from _harness import crash_at, echo

from bots.progress import RESUMED
from bots.store import Outbox
from bots.testing.slack import FakeSlack
from geode.providers.scripted import ScriptedProvider
from geode.store import open_store
from tests.bots.conftest import CHAT, finals
from tests.bots.slack.slack_helpers import (
    ALICE,
    CH,
    SlackStack,
    bot_messages,
    mention,
    settle,
    sid,
    slack_binding,
)


async def test_slack_a_placeholder_sent_but_not_recorded_is_found_and_reused(
    home: Path,
) -> None:
    async with FakeSlack() as fake:
        fake.add_channel(CH)
        provider = ScriptedProvider([echo], repeat_last=True)
        hit, fault = crash_at("progress_sent_before_record")
        stack = SlackStack(home=home, fake=fake, provider=provider,
                           bindings=[slack_binding()], fault=fault)  # type: ignore[arg-type]
        try:
            await stack.start()
            root = await fake.user_posts(CH, mention("crash me"), user=ALICE)
            await asyncio.wait_for(hit.wait(), 30)
            await stack.crash()
            (placeholder,) = bot_messages(fake, CH, thread=root)
            assert placeholder["text"].startswith("⏳")

            stack.fault = None
            await stack.start()

            async def answered() -> bool:
                r = await stack.layer.outbox.get(sid(root), "ev1")
                return r is not None and r.status == "sent"

            await settle(answered, within=30)
            thread = bot_messages(fake, CH, thread=root)
            # one bot message in the thread: the placeholder sent before the crash, now the
            # answer (old code: a second placeholder, the first left "⏳ Working…")
            assert [m["text"] for m in thread] == ["answer to: crash me"], thread
            assert thread[0]["ts"] == placeholder["ts"]
            said = [p.text for p in fake.posts if p.ts == placeholder["ts"]]
            assert any(RESUMED in t for t in said), said
        finally:
            await stack.stop()


async def test_telegram_the_recorded_placeholder_says_resumed_then_holds_the_answer(
    make_stack: Any, fake: Any
) -> None:
    hit, fault = crash_at("turn_started")
    stack = make_stack(provider=ScriptedProvider([echo], repeat_last=True), fault=fault)
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot crash me", from_user=42))
    await asyncio.wait_for(hit.wait(), 30)
    await stack.crash()
    (placeholder,) = [m for m in fake.messages_in(CHAT, from_bot=True)
                      if m.reply_to_message_id == mid]

    stack.fault = None
    await stack.start()
    await fake.wait_until(lambda: finals(fake, "answer to: crash me"), within=30)
    under = [m for m in fake.messages_in(CHAT, from_bot=True) if m.reply_to_message_id == mid]
    assert [m.plain_text for m in under] == ["answer to: crash me"]
    assert under[0].message_id == placeholder.message_id
    texts = [s.plain_text for s in fake.sent if s.message_id == placeholder.message_id]
    assert any(RESUMED in t for t in texts), texts  # said so at once, before the answer
    assert texts.index(next(t for t in texts if RESUMED in t)) < texts.index(
        "answer to: crash me")


async def test_the_intent_is_recorded_with_the_turn_before_the_send(
    make_stack: Any, fake: Any
) -> None:
    hit, fault = crash_at("turn_accepted")
    stack = make_stack(fault=fault)
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot crash me", from_user=42))
    await asyncio.wait_for(hit.wait(), 30)
    await stack.crash()
    assert not [m for m in fake.messages_in(CHAT, from_bot=True)
                if m.reply_to_message_id == mid]  # nothing sent yet

    async with await open_store(stack.store_url) as store:
        row = await Outbox(store=store).get(f"telegram:123456:{CHAT}:{mid}", "ev1")
    # accepted: the intent is there, no id (old code: no trace of a progress message)
    assert row is not None and row.progress_state == "sending"
    assert row.progress_message_id is None

    stack.fault = None
    await stack.start()
    await fake.wait_until(lambda: finals(fake, "answer to: crash me"), within=30)
    under = [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)
             if m.reply_to_message_id == mid]
    assert under == ["answer to: crash me"]


async def test_a_queued_placeholder_is_reused_after_a_crash(make_stack: Any, fake: Any) -> None:
    # one channel lane: one thread's turn waits "⏳ Queued — 1 ahead" (either: the two
    # arrive in one batch)
    stack = make_stack(provider=ScriptedProvider([echo], repeat_last=True, latency=1.5),
                       lanes={"global_cap": 8, "channel_cap": 1, "wait_timeout_s": 30})
    await stack.start()
    first = fake.message_id_for(fake.user_says(CHAT, "@geode_bot one", from_user=42))
    second = fake.message_id_for(fake.user_says(CHAT, "@geode_bot two", from_user=42))

    def queued() -> bool:
        return any(m.reply_to_message_id in (first, second) and "Queued" in m.plain_text
                   for m in fake.messages_in(CHAT, from_bot=True))

    await fake.wait_until(queued, within=30)
    await asyncio.sleep(0.2)
    await stack.crash()

    await stack.start()
    await fake.wait_until(lambda: finals(fake, "answer to: one")
                          and finals(fake, "answer to: two"), within=40)
    for mid, answer in ((first, "answer to: one"), (second, "answer to: two")):
        under = [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)
                 if m.reply_to_message_id == mid]
        assert under == [answer], under  # nothing frozen beside the answer


def test_discord_counts_only_the_turns_own_placeholders() -> None:
    from bots.discord.client import _of_turn
    from bots.events import ReplyTarget

    target = ReplyTarget(channel="10", thread_root="55", reply_to="55")
    in_thread = {"id": "1", "channel_id": "55", "content": "⏳ Working…"}
    replying = {"id": "2", "channel_id": "10", "content": "⏳ Working…",
                "message_reference": {"message_id": "55"}}
    another_turns = {"id": "3", "channel_id": "10", "content": "⏳ Working…",
                     "message_reference": {"message_id": "77"}}
    unattributed = {"id": "4", "channel_id": "10", "content": "⏳ Working…"}
    assert [m["id"] for m in (in_thread, replying, another_turns, unattributed)
            if _of_turn(m, target)] == ["1", "2"]
