"""A Telegram mention to its reply, through the real daemon, factory, store and PTB."""

from __future__ import annotations

from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import (
    CHAT,
    CHAT2,
    binding,
    bot_texts,
    echo,
    finals,
    settled,
    user_messages,
)


async def test_bound_allowed_mention_gets_exactly_one_reply_in_thread(make_stack, fake):
    stack = make_stack()
    await stack.start()
    uid = fake.user_says(CHAT, "@geode_bot what is up?", from_user=42)
    mid = fake.message_id_for(uid)
    await fake.wait_until(lambda: finals(fake, "answer to: what is up?"), within=10)
    # the answer replaced the progress message, which replies to the user's message
    visible = fake.messages_in(CHAT, from_bot=True)
    assert [m.plain_text for m in visible] == ["answer to: what is up?"]
    assert visible[0].reply_to_message_id == mid
    assert len(finals(fake, "answer to: what is up?")) == 1
    assert len(stack.provider.calls) == 1
    # ack reaction and the session id is the thread's fixed id
    assert any(r["message_id"] == mid for r in fake.reactions)
    sid = f"telegram:123456:{CHAT}:{mid}"
    assert await stack.store.sessions.exists(sid)


async def test_unbound_unknown_and_unaddressed_never_reach_the_model(make_stack, fake):
    provider = ScriptedProvider([echo], repeat_last=True)
    stack = make_stack(provider=provider)
    await stack.start()
    fake.user_says(CHAT2, "@geode_bot hello from an unbound chat", from_user=42)
    fake.user_says(CHAT, "no mention here", from_user=42)
    fake.user_says(CHAT, "@geode_bot I am a stranger", from_user=99)
    fake.user_says(CHAT, "@geode_bot stranger again", from_user=99)
    fake.user_says(CHAT, "@geode_bot marker", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: marker"), within=10)
    await settled(stack)  # the other threads' decisions and notices, too
    assert len(provider.calls) == 1
    assert bot_texts(fake, CHAT2) == []
    pairing = [t for t in bot_texts(fake) if "Pairing code" in t]
    assert len(pairing) == 1
    code = pairing[0].split("Pairing code: ")[1].split()[0]
    # approving the code lets the stranger in
    await stack.connector.layer.pairing.approve(code)
    fake.user_says(CHAT, "@geode_bot now paired", from_user=99)
    await fake.wait_until(lambda: finals(fake, "answer to: now paired"), within=10)
    assert len(provider.calls) == 2


async def test_thread_continuity_across_restart(make_stack, fake):
    stack = make_stack()
    await stack.start()
    first = fake.message_id_for(fake.user_says(CHAT, "@geode_bot one", from_user=42))
    await fake.wait_until(lambda: finals(fake, "answer to: one"), within=10)
    reply1 = fake.messages_in(CHAT, from_bot=True)[-1].message_id
    # a follow-up replying to the bot needs no mention
    fake.user_says(CHAT, "two", from_user=43, reply_to=reply1)
    await fake.wait_until(lambda: finals(fake, "answer to: two"), within=10)
    await stack.stop()
    await stack.start()
    reply2 = fake.messages_in(CHAT, from_bot=True)[-1].message_id
    fake.user_says(CHAT, "three", from_user=42, reply_to=reply2)
    await fake.wait_until(lambda: finals(fake, "answer to: three"), within=10)
    # a second thread gets its own session
    other = fake.message_id_for(fake.user_says(CHAT, "@geode_bot other", from_user=42))
    await fake.wait_until(lambda: finals(fake, "answer to: other"), within=10)
    sid = f"telegram:123456:{CHAT}:{first}"
    restored = await stack.store.checkpointer(sid).load()
    said = [t.rsplit("): ", 1)[-1] for t in user_messages(restored.messages)]
    assert said == ["one", "two", "three"]
    # one chain: sequence numbers strictly increase, no second chain for this thread
    rows = await stack.store.checkpoints.list(sid)
    assert [r.seq for r in rows] == sorted({r.seq for r in rows})
    # who said what: one channel.message row per message, with its sender and turn
    timeline = await stack.store.timeline.list(sid)
    said_by = [(r.payload["sender"], r.turn_id) for r in timeline if r.kind == "channel.message"]
    assert [s for s, _ in said_by] == ["42", "43", "42"]
    assert all(t.startswith("t-") for _, t in said_by) and len({t for _, t in said_by}) == 3
    other_sid = f"telegram:123456:{CHAT}:{other}"
    restored2 = await stack.store.checkpointer(other_sid).load()
    assert [t.rsplit("): ", 1)[-1] for t in user_messages(restored2.messages)] == ["other"]


async def test_forum_topic_is_a_thread(make_stack, fake):
    stack = make_stack(bindings=[binding(CHAT2)])
    await stack.start()
    topic = fake.create_topic(CHAT2, "ops")
    fake.user_says(CHAT2, "@geode_bot in topic", from_user=42, message_thread_id=topic)
    await fake.wait_until(lambda: finals(fake, "answer to: in topic"), within=10)
    fake.user_says(CHAT2, "follow up without mention", from_user=42, message_thread_id=topic)
    await fake.wait_until(lambda: finals(fake, "answer to: follow up without mention"),
                          within=10)
    msgs = fake.messages_in(CHAT2, from_bot=True, message_thread_id=topic)
    assert len(msgs) == 2
    sid = f"telegram:123456:{CHAT2}:{topic}"
    restored = await stack.store.checkpointer(sid).load()
    assert len(user_messages(restored.messages)) == 2


async def test_a_slow_model_call_shows_in_the_progress_message(make_stack, fake, home):
    """Issue #23 item 3: the progress message says the model is being waited for (then the
    answer replaces it as usual)."""
    (home / "config.toml").write_text("[model]\nwaiting_notice_s = 0.2\n")
    stack = make_stack(provider=ScriptedProvider([echo], repeat_last=True, latency=1.5))
    await stack.start()
    uid = fake.user_says(CHAT, "@geode_bot take your time", from_user=42)
    await fake.wait_until(
        lambda: any("waiting for the model (" in (s.plain_text or "") for s in fake.sent),
        within=30,
    )
    await fake.wait_until(lambda: finals(fake, "answer to: take your time"), within=30)
    note = next(s.plain_text for s in fake.sent if "waiting for the model" in (s.plain_text or ""))
    assert note.startswith("⏳ Working…") and "attempt 1/" in note
    assert bot_texts(fake) == ["answer to: take your time"]
    # `geode sessions list`: the thread's first message is its title (issue #23 item 4)
    record = await stack.store.sessions.get(f"telegram:123456:{CHAT}:{fake.message_id_for(uid)}")
    assert record is not None and record.title == "take your time"
