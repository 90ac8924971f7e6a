"""Discord thread history: the first mention inside an existing thread the bot has not seen
brings the thread's earlier messages to the model (as Slack and Telegram do)."""

from __future__ import annotations

from _discord_stack import (  # noqa: F401  (fixtures)
    dbinding,
    dfake,
    make_dstack,
    wait_shown,
)

from tests.bots._harness import user_messages


async def test_first_mention_in_an_unseen_thread_brings_its_earlier_messages(make_dstack, dfake):  # noqa: F811 (fixtures)
    # Said before the bot was running: nothing of it is recorded.
    start = await dfake.user_says(dfake.channel_id, "the nightly build broke")
    thread = await dfake.create_thread(dfake.channel_id, name="build", message_id=start)
    await dfake.user_says(dfake.channel_id, "the log ends with OOM at step 3",
                          thread_id=thread, author_id=dfake.bob)
    await dfake.user_says(dfake.channel_id, "it passed on Monday", thread_id=thread)
    stack = make_dstack()
    await stack.start()
    await dfake.user_says(dfake.channel_id, "what happened?", thread_id=thread,
                          mention_bot=True)
    await wait_shown(dfake, "answer to: what happened?")
    [call] = stack.provider.calls
    prompt = user_messages(call.messages)[-1]
    assert "[Earlier messages in this thread]" in prompt
    earlier = prompt.split("[Earlier messages in this thread]", 1)[1]
    earlier = earlier.split("[End of earlier messages]", 1)[0]
    # oldest first, the starter message (in the parent channel) included
    assert earlier.index("the nightly build broke") < earlier.index("OOM at step 3") \
        < earlier.index("it passed on Monday")
    assert "what happened?" not in earlier

    # a later mention in the same thread does not fetch (or repeat) the history again
    await dfake.user_says(dfake.channel_id, "and now?", thread_id=thread, mention_bot=True)
    await wait_shown(dfake, "answer to: and now?")
    last = user_messages(stack.provider.calls[-1].messages)[-1]
    assert "[Earlier messages in this thread]" not in last
