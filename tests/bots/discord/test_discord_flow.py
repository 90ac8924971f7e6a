"""A Discord mention to its reply, through the real daemon, factory, store and discord.py
(against the wire-level fake Discord)."""

from __future__ import annotations

import asyncio

from _discord_stack import (  # noqa: F401  (fixtures)
    dbinding,
    dfake,
    make_dstack,
    said,
    sid,
    texts_in,
    visible_everywhere,
    wait_shown,
)
from sqlalchemy import select

from bots.store._tables import events_table
from geode.providers.scripted import ScriptedProvider


async def test_bound_allowed_mention_gets_one_reply_in_a_new_thread(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack = make_dstack()
    await stack.start()
    mid = await dfake.user_says(dfake.channel_id, "what is up?", mention_bot=True)
    await wait_shown(dfake, "answer to: what is up?")
    # a thread was opened on the message (same id), and the answer lives there, once
    assert [t["id"] for t in dfake.threads_created] == [str(mid)]
    assert texts_in(dfake, mid) == ["answer to: what is up?"]
    assert texts_in(dfake, dfake.channel_id) == []
    assert visible_everywhere(dfake, "answer to: what is up?") == 1
    assert len(stack.provider.calls) == 1
    # ack reaction on the user's message; typing, if the answer left time for it, in the
    # thread (a slower answer's typing: test_the_ack_opens_the_thread_while_the_model_thinks)
    assert (dfake.channel_id, mid, "👀") in dfake.reactions
    assert set(dfake.typing) <= {mid}
    assert await stack.store.sessions.exists(sid(dfake, mid))
    # the bot never pings anybody with what the model wrote
    assert all(s.content.count("@everyone") == 0 for s in dfake.sent)


async def test_the_ack_opens_the_thread_while_the_model_thinks_with_one_request(make_dstack, dfake):  # noqa: F811 (fixtures)
    """A turn starting (its ack) opens the reply's thread at once: the first words then need
    one request, not two (at 50 chats at once, the 50 threads' requests no longer wait for the
    first words). The progress message sent at the same moment shares that one request."""
    thinking = asyncio.Event()

    class _Slow(ScriptedProvider):
        async def complete(self, request):  # type: ignore[no-untyped-def]
            await thinking.wait()
            return await super().complete(request)

    stack = make_dstack(provider=_Slow([lambda r: "later"], repeat_last=True),
                        options={"progress_after_ms": 60_000})
    await stack.start()
    mid = await dfake.user_says(dfake.channel_id, "take your time", mention_bot=True)
    await dfake.wait_for(lambda: dfake.threads_created, timeout=10)
    assert [t["id"] for t in dfake.threads_created] == [str(mid)]  # the model still thinks
    assert dfake.sent == []  # no progress message yet (the answer may be quick)
    await dfake.wait_for(lambda: mid in dfake.typing, timeout=10)  # typing in the thread
    assert (dfake.channel_id, mid, "👀") in dfake.reactions and set(dfake.typing) == {mid}
    thinking.set()
    await wait_shown(dfake, "later")
    assert texts_in(dfake, mid) == ["later"]  # in the thread opened early


async def test_the_ack_and_the_first_message_open_the_thread_with_one_request(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack = make_dstack()  # progress_after_ms 0: the progress message goes beside the ack
    await stack.start()
    mid = await dfake.user_says(dfake.channel_id, "and now?", mention_bot=True)
    await wait_shown(dfake, "answer to: and now?")
    opened = [r for r in dfake.requests if r[0] == "POST" and r[1].endswith("/threads")]
    assert len(opened) == 1 and [t["id"] for t in dfake.threads_created] == [str(mid)]
    assert texts_in(dfake, mid) == ["answer to: and now?"]


async def test_unbound_unknown_and_unaddressed_never_reach_the_model(make_dstack, dfake):  # noqa: F811 (fixtures)
    provider = ScriptedProvider([lambda r: "hello"], repeat_last=True)
    stack = make_dstack(provider=provider)
    await stack.start()
    await dfake.user_says(dfake.other_channel, "unbound channel", mention_bot=True)
    await dfake.user_says(dfake.channel_id, "no mention here")
    await dfake.user_says(dfake.channel_id, "stranger", mention_bot=True,
                          author_id=dfake.stranger)
    await dfake.user_says(dfake.channel_id, "stranger again", mention_bot=True,
                          author_id=dfake.stranger)
    await dfake.user_says(dfake.channel_id, "marker", mention_bot=True)
    await dfake.wait_for(lambda: len(provider.calls) == 1 and visible_everywhere(
        dfake, "hello") == 1, timeout=10)
    assert len(provider.calls) == 1
    assert "marker" in provider.calls[0].messages[-1].text
    assert texts_in(dfake, dfake.other_channel) == []
    # the strangers' two mentions start two threads, decided concurrently with the marker's:
    # the one pairing notice may still be on its way when the marker's answer shows
    layer = stack.connector.layer
    async with asyncio.timeout(10):
        while (await layer.inbound.unfinished("discord", layer.client.workspace)
               or await layer.outbox.open_rows("discord", layer.client.workspace)):
            await asyncio.sleep(0.02)
    pairing = [s.content for s in dfake.sent if "Pairing code" in s.content]
    assert len(pairing) == 1
    # nothing of the unbound channel was stored; unaddressed/stranger events were recorded
    async with stack.store.read() as conn:
        rows = (await conn.execute(select(events_table.c.channel, events_table.c.decision))).all()
    assert str(dfake.other_channel) not in {r.channel for r in rows}
    assert sorted(r.decision for r in rows) == sorted(
        ["not_addressed", "pairing", "unknown_sender", "turn"])
    code = pairing[0].split("Pairing code: ")[1].split()[0]
    await stack.connector.layer.pairing.approve(code)
    await dfake.user_says(dfake.channel_id, "now paired", mention_bot=True,
                          author_id=dfake.stranger)
    await dfake.wait_for(lambda: len(provider.calls) == 2, timeout=10)


async def test_thread_continuity_across_restart(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack = make_dstack()
    await stack.start()
    root = await dfake.user_says(dfake.channel_id, "one", mention_bot=True)
    await wait_shown(dfake, "answer to: one")
    # follow-ups in the thread need no mention, from anybody allowed
    await dfake.user_says(dfake.channel_id, "two", thread_id=root, author_id=dfake.bob)
    await wait_shown(dfake, "answer to: two")
    await stack.stop()
    await stack.start()
    await dfake.user_says(dfake.channel_id, "three", thread_id=root)
    await wait_shown(dfake, "answer to: three")
    other = await dfake.user_says(dfake.channel_id, "other", mention_bot=True)
    await wait_shown(dfake, "answer to: other")
    restored = await stack.store.checkpointer(sid(dfake, root)).load()
    assert said(restored.messages) == ["one", "two", "three"]
    rows = await stack.store.checkpoints.list(sid(dfake, root))
    assert [r.seq for r in rows] == sorted({r.seq for r in rows})
    restored2 = await stack.store.checkpointer(sid(dfake, other)).load()
    assert said(restored2.messages) == ["other"]
    assert texts_in(dfake, root) == ["answer to: one", "answer to: two", "answer to: three"]


async def test_replies_in_place_where_threads_are_refused(make_dstack, dfake):  # noqa: F811 (fixtures)
    no_threads = dfake.add_text_channel(dfake.guild_id, "no-threads", threads_allowed=False)
    stack = make_dstack(bindings=[dbinding(dfake, no_threads)])
    await stack.start()
    mid = await dfake.user_says(no_threads, "inline please", mention_bot=True)
    await wait_shown(dfake, "answer to: inline please")
    assert dfake.threads_created == []
    answer = next(m for m in dfake.messages_in(no_threads)
                  if m["content"] == "answer to: inline please")
    assert answer["message_reference"]["message_id"] == str(mid)
    # replying to the bot's answer continues the same session (the reply chain is the thread)
    msg_id = await dfake.user_says(no_threads, "and then?")  # not addressed: ignored
    assert msg_id
    reply = dfake._store_message(no_threads, dfake.user_id, "follow", reference={
        "message_id": answer["id"], "channel_id": str(no_threads)})
    await dfake._dispatch("MESSAGE_CREATE", reply)
    await wait_shown(dfake, "answer to: follow")
    restored = await stack.store.checkpointer(sid(dfake, mid, no_threads)).load()
    assert said(restored.messages) == ["inline please", "follow"]
    assert len(stack.provider.calls) == 2


async def test_inline_reply_mode_option(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack = make_dstack(options={"reply_mode": "inline"})
    await stack.start()
    mid = await dfake.user_says(dfake.channel_id, "no thread", mention_bot=True)
    await wait_shown(dfake, "answer to: no thread")
    assert dfake.threads_created == []
    assert texts_in(dfake, dfake.channel_id) == ["answer to: no thread"]
    assert dfake.sent[0].reference == mid


async def test_a_thread_the_ack_failed_to_open_is_opened_by_the_first_send(make_dstack, dfake):  # noqa: F811 (fixtures)
    """The early opening is a head start, never a condition: when it fails, the first send
    opens the thread itself and the answer lands there, once."""
    stack = make_dstack(options={"progress_after_ms": 60_000})
    await stack.start()
    # the ack's opening refused (a 400 is not retried); nothing else posts in the channel
    dfake.fail_next(f"POST /channels/{dfake.channel_id}/messages/", status=400)
    mid = await dfake.user_says(dfake.channel_id, "still there?", mention_bot=True)
    await wait_shown(dfake, "answer to: still there?")
    opened = [r for r in dfake.requests if r[0] == "POST" and r[1].endswith("/threads")]
    assert len(opened) == 2 and [t["id"] for t in dfake.threads_created] == [str(mid)]
    assert texts_in(dfake, mid) == ["answer to: still there?"]
    assert (dfake.channel_id, mid, "👀") in dfake.reactions  # the ack still went
    assert visible_everywhere(dfake, "answer to: still there?") == 1
