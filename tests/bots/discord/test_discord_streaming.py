"""A Discord answer that streams into its progress message by paced edits, and a quick one
that is a single message (the real daemon and discord.py against FakeDiscord)."""

from __future__ import annotations

from _discord_stack import (  # noqa: F401  (fixtures)
    dfake,
    make_dstack,
    texts_in,
    wait_shown,
)

from geode.providers.scripted import ScriptedProvider

ANSWER = "Here is **bold text across pieces** and more.\n\n```\nx = 1\n```\n\nDone."


async def test_the_answer_grows_by_paced_edits(make_dstack, dfake) -> None:  # noqa: F811
    provider = ScriptedProvider([ANSWER], repeat_last=True, stream_piece=8,
                                stream_every_s=0.05)
    stack = make_dstack(provider=provider, options={"stream": True, "progress_after_ms": 0})
    await stack.start()
    mid = await dfake.user_says(dfake.channel_id, "explain", mention_bot=True)
    await dfake.wait_for(lambda: any(t.endswith("Done.") and not t.startswith("⏳")
                                     for t in texts_in(dfake, mid)), timeout=15)
    drafts = [c for _, _, c in dfake.edits if c and c.startswith("⏳ Working")]
    assert len(drafts) >= 2, dfake.edits
    # an open bold or fence is closed in each state: markers come in pairs
    assert all(d.count("**") % 2 == 0 and d.count("```") % 2 == 0 for d in drafts), drafts
    assert len(texts_in(dfake, mid)) == 1


async def test_a_quick_answer_is_one_message(make_dstack, dfake) -> None:  # noqa: F811
    stack = make_dstack(options={"stream": True, "progress_after_ms": 1000})
    await stack.start()
    mid = await dfake.user_says(dfake.channel_id, "quick", mention_bot=True)
    await wait_shown(dfake, "answer to: quick")
    assert texts_in(dfake, mid) == ["answer to: quick"]
    assert not dfake.edits
