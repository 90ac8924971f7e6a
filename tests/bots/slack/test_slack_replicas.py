"""Two Slack replicas on one store, active-active: Slack hands each Socket Mode envelope to one
of the app's connections (the fake does round-robin), either replica may record a thread's
messages, and the holder of the thread's lease answers each exactly once, in one session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from slack_helpers import ALICE, CH, SlackStack, mention, quiescent, sid, slack_binding, visible

from bots.testing.slack import FakeSlack
from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import echo, store_url_for, user_messages


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_url(request: pytest.FixtureRequest, home: Path) -> str:
    if request.param == "sqlite":
        return store_url_for(home)
    return str(request.getfixturevalue("pg_store_url"))


@pytest.fixture
async def pair(shared_url: str, home: Path,
               fake: FakeSlack) -> AsyncIterator[tuple[SlackStack, SlackStack]]:
    stacks = []
    for name in ("a", "b"):
        (home / name).mkdir()
        stacks.append(SlackStack(
            home=home / name, fake=fake, store_url=shared_url,
            provider=ScriptedProvider([echo], repeat_last=True, latency=0.2),
            bindings=[slack_binding()], options={"max_concurrent_threads": 2}))
    try:
        for s in stacks:
            await s.start()
        await fake.wait_until(lambda: fake.connected == 2, within=10)
        yield stacks[0], stacks[1]
    finally:
        for s in stacks:
            await s.stop()


async def test_both_replicas_record_and_answer_each_message_once(
    pair: tuple[SlackStack, SlackStack], fake: FakeSlack
) -> None:
    a, b = pair
    roots = [await fake.user_posts(CH, mention(f"s{i}"), user=ALICE) for i in range(6)]
    follow = [await fake.user_posts(CH, f"more s{i}", user=ALICE, thread_ts=ts)
              for i, ts in enumerate(roots[:3])]
    await fake.wait_until(
        lambda: all(visible(fake, f"answer to: s{i}") for i in range(6))
        and all(visible(fake, f"answer to: more s{i}") for i in range(3)), within=30)
    await quiescent(a)
    await quiescent(b)
    for text in [*(f"s{i}" for i in range(6)), *(f"more s{i}" for i in range(3))]:
        assert len(visible(fake, f"answer to: {text}")) == 1, text
    # both replicas answered (two threads at a time each: six threads need both)
    assert a.provider.calls and b.provider.calls
    assert len(a.provider.calls) + len(b.provider.calls) == 9
    # a thread's two messages are one session, in order, whoever recorded them
    for i, ts in enumerate(roots[:3]):
        restored = await a.store.checkpointer(sid(ts)).load()
        assert restored is not None
        said = [t.rsplit("): ", 1)[-1] for t in user_messages(restored.messages)]
        assert said == [mention(f"s{i}").split(" ", 1)[1], f"more s{i}"], said
    assert len(follow) == 3
