"""``/geode remind WHEN WHAT [thread]`` sets a reminder that fires in the thread, and
``/geode reminders [thread]`` lists the thread's."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_helpers import ALICE, CH, bot_messages, make, mention, slack_binding, visible

from bots.testing.slack import FakeSlack


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as srv:
        srv.add_channel(CH)
        yield srv


async def test_slash_remind_sets_a_reminder_that_fires_in_the_thread(stacks, home, fake):
    stack = make(stacks, home, fake, bindings=[slack_binding()])
    await stack.start()
    root = await fake.user_posts(CH, mention("hello"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: hello"), within=10)
    await fake.slash_command("/geode", f"remind in 1s check the deploy {root}", CH, ALICE)
    await fake.wait_until(lambda: any(m["text"].startswith("⏰ Reminder rem-")
                                      for m in bot_messages(fake, CH, thread=root)), within=10)
    await fake.wait_until(lambda: any(m["text"] == "answer to: check the deploy"
                                      for m in bot_messages(fake, CH, thread=root)), within=15)
    await fake.slash_command("/geode", f"reminders {root}", CH, ALICE)
    await fake.wait_until(lambda: any(m["text"].startswith("No reminders in this thread")
                                      for m in bot_messages(fake, CH, thread=root)), within=10)
