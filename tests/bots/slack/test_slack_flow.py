"""Slack mention to threaded reply, policy, continuity, catch-up, commands and progress,
through the real daemon, store, slack-bolt and slack_sdk against FakeSlack (Socket Mode)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from slack_helpers import (
    ALICE,
    BOB,
    CH,
    CH2,
    STRANGER,
    SlackStack,
    bot_messages,
    make,
    mention,
    quiescent,
    settle,
    sid,
    slack_binding,
    visible,
    written,
)

from bots.testing.slack import FakeSlack
from geode.providers.scripted import ScriptedProvider
from tests.bots._harness import calls_tool
from tests.bots.conftest import user_messages


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as srv:
        srv.add_channel(CH)
        srv.add_channel(CH2)
        yield srv


async def test_bound_allowed_mention_gets_one_threaded_reply(stacks, home, fake):
    stack = make(stacks, home, fake)
    await stack.start()
    ts = await fake.user_posts(CH, mention("what is up?"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: what is up?"), within=10)
    # the answer is in a thread on the user's message: the progress message, edited
    in_thread = bot_messages(fake, CH, thread=ts)
    assert [m["text"] for m in in_thread] == ["answer to: what is up?"]
    assert in_thread[0]["thread_ts"] == ts
    assert fake.messages_in(CH) == [m for m in fake.messages_in(CH) if m["ts"] == ts]
    # both events of the post (message + app_mention) were acked; the model ran once
    assert len(fake.envelopes) == 2
    await fake.wait_until(lambda: not fake.unacked)
    await quiescent(stack)
    assert len(stack.provider.calls) == 1
    assert len(bot_messages(fake, CH, thread=ts)) == 1
    assert len(written(fake, "answer to: what is up?")) == 1
    assert {"channel": CH, "ts": ts, "name": "eyes"} in fake.reactions
    assert await stack.store.sessions.exists(sid(ts))
    # every Web API call passed top-level text where one is needed
    for call in fake.calls_to("chat.postMessage") + fake.calls_to("chat.update"):
        assert call.params.get("text")


async def test_unbound_unknown_and_unaddressed_never_reach_the_model(stacks, home, fake):
    stack = make(stacks, home, fake)
    await stack.start()
    await fake.user_posts(CH2, mention("hello from an unbound channel"), user=ALICE)
    await fake.user_posts(CH, "no mention here", user=ALICE)
    await fake.user_posts(CH, mention("I am a stranger"), user=STRANGER)
    await fake.user_posts(CH, mention("stranger again"), user=STRANGER)
    await fake.user_posts(CH, "a bot speaks", user="U0OTHERBOT", extra={"bot_id": "B0OTHER"})
    await fake.user_posts(CH, mention("marker"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: marker"), within=10)

    def pairing_posts() -> list[str]:
        return [m["text"] for m in bot_messages(fake, CH) if "Pairing code" in m["text"]]

    # each mention is a thread of its own: the stranger's are not ordered before the marker's
    await fake.wait_until(pairing_posts, within=10)
    await asyncio.sleep(0.3)  # the stranger's second mention had its chance to mint again
    assert len(stack.provider.calls) == 1
    assert bot_messages(fake, CH2) == []
    pairing = pairing_posts()
    assert len(pairing) == 1
    code = pairing[0].split("Pairing code: ")[1].split()[0]
    await stack.layer.pairing.approve(code)
    await fake.user_posts(CH, mention("now paired"), user=STRANGER)
    await fake.wait_until(lambda: visible(fake, "answer to: now paired"), within=10)
    assert len(stack.provider.calls) == 2


async def test_other_bots_are_answered_only_where_the_binding_allows_bots(stacks, home, fake):
    stack = make(stacks, home, fake, bindings=[
        slack_binding(CH, allow_users=[ALICE, "B0OTHER"]),
        slack_binding(CH2, allow_users=[ALICE, "B0OTHER"], allow_bots=True),
    ])
    await stack.start()
    await fake.user_posts(CH, mention("from a bot, denied"), user="",
                          extra={"bot_id": "B0OTHER", "subtype": "bot_message"})
    await fake.user_posts(CH2, mention("from a bot, allowed"), user="",
                          extra={"bot_id": "B0OTHER", "subtype": "bot_message"})
    await fake.wait_until(lambda: visible(fake, "answer to: from a bot, allowed", CH2),
                          within=10)
    await fake.user_posts(CH, mention("marker"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: marker"), within=10)
    assert len(stack.provider.calls) == 2
    assert not visible(fake, "answer to: from a bot, denied")


async def test_thread_continuity_across_restart(stacks, home, fake):
    stack = make(stacks, home, fake)
    await stack.start()
    root = await fake.user_posts(CH, mention("one"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: one"), within=10)
    # a follow-up in the engaged thread needs no mention, from another allowed member too
    await fake.user_posts(CH, "two", user=BOB, thread_ts=root)
    await fake.wait_until(lambda: visible(fake, "answer to: two"), within=10)
    await stack.stop()
    await stack.start()
    await fake.user_posts(CH, "three", user=ALICE, thread_ts=root)
    await fake.wait_until(lambda: visible(fake, "answer to: three"), within=10)
    other = await fake.user_posts(CH, mention("other"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: other"), within=10)
    restored = await stack.store.checkpointer(sid(root)).load()
    said = [t.rsplit("): ", 1)[-1] for t in user_messages(restored.messages)]
    assert said == ["one", "two", "three"]
    assert [m["text"] for m in bot_messages(fake, CH, thread=root)] == [
        "answer to: one", "answer to: two", "answer to: three"]
    restored2 = await stack.store.checkpointer(sid(other)).load()
    assert [t.rsplit("): ", 1)[-1] for t in user_messages(restored2.messages)] == ["other"]


async def test_catch_up_answers_what_was_posted_while_down(stacks, home, fake):
    stack = make(stacks, home, fake)
    await stack.start()
    root = await fake.user_posts(CH, mention("before"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: before"), within=10)
    await stack.stop()
    # posted while nobody listened: Slack never delivers these as events
    await fake.user_posts(CH, "follow-up while down", user=ALICE, thread_ts=root,
                          deliver=False)
    top = await fake.user_posts(CH, mention("new while down"), user=BOB, deliver=False)
    await fake.user_posts(CH, "chatter while down", user=BOB, deliver=False)
    await fake.user_posts(CH2, mention("unbound while down"), user=BOB, deliver=False)
    await stack.start()
    await fake.wait_until(lambda: visible(fake, "answer to: follow-up while down")
                          and visible(fake, "answer to: new while down"), within=10)
    assert [m["text"] for m in bot_messages(fake, CH, thread=top)] == [
        "answer to: new while down"]
    assert len(stack.provider.calls) == 3
    assert bot_messages(fake, CH2) == []
    # a second restart finds nothing new: nothing is answered twice
    await stack.stop()
    await stack.start()
    await fake.user_posts(CH, mention("marker"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: marker"), within=10)
    assert len(stack.provider.calls) == 4
    assert len(visible(fake, "answer to: new while down")) == 1
    assert len(visible(fake, "answer to: follow-up while down")) == 1


async def test_catch_up_finds_a_mention_in_an_old_thread_the_bot_never_joined(
    stacks, home, fake
):
    stack = make(stacks, home, fake)
    await stack.start()
    old_root = await fake.user_posts(CH, "lunch plans?", user=BOB)  # no mention: not engaged
    await fake.user_posts(CH, mention("marker"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: marker"), within=10)
    await stack.stop()
    # while down, somebody asks the bot in that old thread
    await fake.user_posts(CH, mention("in the old thread"), user=ALICE, thread_ts=old_root,
                          deliver=False)
    await stack.start()
    await fake.wait_until(lambda: visible(fake, "answer to: in the old thread"), within=10)
    assert [m["text"] for m in bot_messages(fake, CH, thread=old_root)] == [
        "answer to: in the old thread"]
    assert not visible(fake, "answer to: lunch plans?")  # its root is still not answered
    await stack.stop()
    await stack.start()  # and a second restart answers nothing twice
    await fake.user_posts(CH, mention("marker 2"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: marker 2"), within=10)
    assert len(visible(fake, "answer to: in the old thread")) == 1



async def test_binding_tool_allow_list_denies_at_runtime(stacks, home, fake):
    provider = ScriptedProvider([calls_tool("write_file", {"path": "x.txt", "content": "hi"})],
                                repeat_last=True)
    stack = make(stacks, home, fake, provider=provider,
                 bindings=[slack_binding(tools=["read_file"])])
    await stack.start()
    ts = await fake.user_posts(CH, mention("write it"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "done"), within=10)
    rows = await stack.store.timeline.list(sid(ts))
    assert [r.payload["tool"] for r in rows if r.kind == "tool.denied"] == ["write_file"]
    assert not (home / "ws" / "x.txt").exists()
    assert not list((home / "workspaces").rglob("x.txt"))


async def test_slash_geode_status_and_stop_cancel_the_running_turn(stacks, home, fake):
    started = asyncio.Event()
    release = asyncio.Event()

    class Slow(ScriptedProvider):
        async def complete(self, request):  # a model that waits until stopped
            self.calls.append(request)
            started.set()
            await release.wait()
            return self._to_response("late", request.model)

    stack = make(stacks, home, fake, provider=Slow())
    await stack.start()
    root = await fake.user_posts(CH, mention("long job"), user=ALICE)
    await asyncio.wait_for(started.wait(), 10)
    env = await fake.slash_command("/geode", "status", CH, ALICE)
    await fake.wait_until(lambda: any("running: turn" in m["text"]
                                      for m in bot_messages(fake, CH, thread=root)), within=10)
    assert "answering in the thread" in fake.ack_payloads[env]["text"]
    await fake.slash_command("/geode", "stop", CH, ALICE)
    await fake.wait_until(lambda: any(m["text"].startswith("⏹ Stopped")
                                      for m in bot_messages(fake, CH, thread=root)), within=10)
    assert not visible(fake, "late")
    # the same command from a stranger never stops anything: it gets a pairing code
    await fake.slash_command("/geode", "new", CH, STRANGER)
    await fake.wait_until(lambda: any("Pairing code" in m["text"]
                                      for m in bot_messages(fake, CH, thread=root)), within=10)
    assert await stack.store.sessions.get(f"{sid(root)}#1") is None
    # /geode new <thread ts> from a member starts a linked session
    await fake.slash_command("/geode", f"new {root}", CH, ALICE)
    await fake.wait_until(lambda: any("New session" in m["text"]
                                      for m in bot_messages(fake, CH, thread=root)), within=10)
    new = await stack.store.sessions.get(f"{sid(root)}#1")
    assert new is not None and new.parent_session_id == sid(root)
    # help needs no thread and is answered ephemerally in the ack
    env = await fake.slash_command("/geode", "help", CH2, ALICE)
    await fake.wait_until(lambda: env in fake.ack_payloads)
    assert "/geode stop" in fake.ack_payloads[env]["text"]
    release.set()


async def test_status_api_then_fallback_when_the_scope_is_missing(stacks, home, fake):
    stack = make(stacks, home, fake, options={"typing_interval_s": 0.05})
    await stack.start()
    root = await fake.user_posts(CH, mention("with status"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: with status"), within=10)
    def statuses() -> list[str]:
        return [s["status"] for s in fake.statuses if s["thread_ts"] == root]

    # cleared once the answer landed
    await fake.wait_until(lambda: statuses() and statuses()[-1] == "", within=5)
    assert statuses()[0] == "is working…"
    await stack.stop()
    fake.fail_next("assistant.threads.setStatus", status=200, error="missing_scope", times=5)
    await stack.start()
    before = len(fake.calls_to("assistant.threads.setStatus"))
    await fake.user_posts(CH, mention("without status"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: without status"), within=10)
    # one refused attempt, then the progress message is the only indicator
    assert len(fake.calls_to("assistant.threads.setStatus")) - before == 1
    assert any(p.text.startswith("⏳") for p in fake.posts if p.method == "chat.postMessage")


async def test_rate_limited_post_is_retried_after_retry_after(stacks, home, fake):
    stack = make(stacks, home, fake)
    await stack.start()
    fake.fail_next("chat.postMessage", status=429, retry_after=1)
    await fake.user_posts(CH, mention("limited"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: limited"), within=10)
    posts = fake.calls_to("chat.postMessage")
    assert posts[0].status == 429 and posts[1].status == 200
    assert len(visible(fake, "answer to: limited")) == 1
    assert len(stack.provider.calls) == 1


async def test_long_answer_is_chunked_in_mrkdwn_with_balanced_fences(stacks, home, fake):
    code = "\n".join(f"line {i} = {i} * 2  # <tag> & more" for i in range(300))
    answer = f"# Report\n\n**Summary** see below\n\n```python\n{code}\n```\n\nDone."
    stack = make(stacks, home, fake, provider=ScriptedProvider([answer], repeat_last=True))
    await stack.start()
    root = await fake.user_posts(CH, mention("long"), user=ALICE)
    await fake.wait_until(lambda: any(m["text"].endswith("Done.")
                                      for m in bot_messages(fake, CH, thread=root)), within=10)
    await settle(lambda: _sent(stack, root))
    texts = [m["text"] for m in bot_messages(fake, CH, thread=root)]
    assert len(texts) >= 3
    assert texts[0].startswith("*Report*\n\n*Summary* see below")
    for t in texts:
        assert len(t) <= 3900
        assert t.count("```") % 2 == 0
        assert ("<tag>" not in t and "&lt;tag&gt; &amp; more" in t) or "line" not in t
    joined = "".join(texts)
    assert all(f"line {i} = {i} * 2" in joined for i in range(300))


async def _sent(stack: SlackStack, root: str) -> bool:
    row = await stack.layer.outbox.get(sid(root), "ev1")
    return row is not None and row.status == "sent"


async def test_mention_mid_thread_brings_the_earlier_thread_messages_once(stacks, home, fake):
    stack = make(stacks, home, fake)
    await stack.start()
    root = await fake.user_posts(CH, "the deploy failed again", user=BOB)  # recorded, ignored
    # replies the app never got as events (e.g. posted before it was invited)
    await fake.user_posts(CH, "log says disk full", user=BOB, thread_ts=root, deliver=False)
    await fake.user_posts(CH, "on node 7", user=ALICE, thread_ts=root, deliver=False)
    await fake.user_posts(CH, mention("what should we do?"), user=ALICE, thread_ts=root)
    await fake.wait_until(lambda: visible(fake, "answer to: what should we do?"), within=10)
    prompt = stack.provider.calls[0].messages[-1].text
    assert "[Earlier messages in this thread]" in prompt
    for said in ("the deploy failed again", "log says disk full", "on node 7"):
        assert prompt.count(said) == 1
    assert [m["text"] for m in bot_messages(fake, CH, thread=root)] == [
        "answer to: what should we do?"]
