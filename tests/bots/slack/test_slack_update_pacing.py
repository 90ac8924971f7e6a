"""Streamed drafts that go by chat.update (Slack's own chat streaming off) stay within the
workspace's chat.update budget (Tier 3): against a fake that answers 429 past it, several
threads streaming at once meet none, the drafts yield to the answers, and every final
answer is exact (the real daemon and slack_sdk against FakeSlack)."""

from __future__ import annotations

from slack_helpers import ALICE, CH, bot_messages, make, mention

from bots.testing.slack import FakeSlack
from geode.providers.scripted import ScriptedProvider

ANSWER = "Streaming " + "word " * 12 + "done."
THREADS = 6


async def test_streaming_threads_keep_within_the_chat_update_tier(stacks, home,
                                                                 fake: FakeSlack) -> None:
    # 120 a minute, as a bucket of 20 refilled at 2 a second; the client keeps to 100 a minute
    fake.update_limit, fake.update_period_s = 20, 10.0
    provider = ScriptedProvider([ANSWER], repeat_last=True, stream_piece=6,
                                stream_every_s=0.08)
    stack = make(stacks, home, fake, provider=provider, options={
        "stream": True, "progress_after_ms": 0, "progress_edit_interval_s": 0.1,
        "native_stream": False, "updates_per_min": 100})
    await stack.start()
    roots = [await fake.user_posts(CH, mention(f"go {i}"), user=ALICE) for i in range(THREADS)]

    def answered() -> bool:
        return all([m["text"] for m in bot_messages(fake, CH, thread=ts)] == [ANSWER]
                   for ts in roots)

    await fake.wait_until(answered, within=60)
    assert fake.limited == 0, [(c.status, str(c.params.get("text"))[:40])
                               for c in fake.calls_to("chat.update")]
    assert all(c.status in (None, 200) for c in fake.calls_to("chat.update"))
    drafts = [c for c in fake.calls_to("chat.update")
              if str(c.params.get("text", "")).startswith("⏳ Working")]
    # it streamed, and fewer drafts than unpaced edits every 0.1 s of each answer would be
    assert 0 < len(drafts) < THREADS * 5, len(drafts)
