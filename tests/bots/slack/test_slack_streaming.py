"""A Slack answer that streams into its progress message by chat.update (paced: Slack's
own chat streaming off, see test_slack_native_stream.py for it), and a quick one that is a
single chat.postMessage (the real daemon and slack_sdk against FakeSlack)."""

from __future__ import annotations

from slack_helpers import ALICE, CH, bot_messages, make, mention, visible

from bots.testing.slack import FakeSlack
from geode.providers.scripted import ScriptedProvider

ANSWER = "Here is **bold text across pieces** and `code`.\n\n```\nx = 1\n```\n\nDone."
SHOWN = ("chat.postMessage", "chat.update")


async def test_the_answer_grows_by_paced_updates(stacks, home, fake: FakeSlack) -> None:
    provider = ScriptedProvider([ANSWER], repeat_last=True, stream_piece=8,
                                stream_every_s=0.05)
    stack = make(stacks, home, fake, provider=provider, options={
        "stream": True, "progress_after_ms": 0, "progress_edit_interval_s": 0.1,
        "native_stream": False})
    await stack.start()
    ts = await fake.user_posts(CH, mention("explain"), user=ALICE)
    await fake.wait_until(lambda: [m for m in bot_messages(fake, CH, thread=ts)
                                   if m["text"].endswith("Done.")
                                   and not m["text"].startswith("⏳")], within=15)
    updates = [c.params.get("text") or "" for c in fake.calls_to("chat.update")]
    drafts = [t for t in updates if t.startswith("⏳ Working")]
    assert len(drafts) >= 2, updates  # it grew: more than one state before the answer
    # mrkdwn bold and no stray markdown markers in any state
    assert any("*bold text" in d for d in drafts) and not any("**" in d for d in drafts)
    assert len(bot_messages(fake, CH, thread=ts)) == 1


async def test_a_quick_answer_is_one_post(stacks, home, fake: FakeSlack) -> None:
    stack = make(stacks, home, fake, options={"stream": True, "progress_after_ms": 1000})
    await stack.start()
    ts = await fake.user_posts(CH, mention("quick"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: quick"), within=10)
    assert [c.method for c in fake.calls if c.method in SHOWN] == ["chat.postMessage"]
    assert [m["text"] for m in bot_messages(fake, CH, thread=ts)] == ["answer to: quick"]
