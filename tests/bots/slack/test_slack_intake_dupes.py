"""Slack delivers a mention twice (``message`` and ``app_mention``, one dedupe key): the
second costs no write, and the mention is still recorded once and answered once, also when
a restarted process gets it again (the store's dedupe, not this process's memory)."""

from __future__ import annotations

from typing import Any

from slack_helpers import ALICE, CH, make, mention, quiescent, visible, written


async def test_the_second_delivery_of_a_mention_writes_nothing(stacks: Any, home: Any,
                                                                fake: Any) -> None:
    stack = make(stacks, home, fake)
    await stack.start()
    connector = stack.connector
    records: list[list[str]] = []
    real = connector.submit

    async def counted(events: Any, **kw: Any) -> Any:
        records.append([ev.dedupe_key for ev, _status in events])
        return await real(events, **kw)

    connector.submit = counted
    ts = await fake.user_posts(CH, mention("hello there"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: hello there"), within=10)
    await fake.wait_until(lambda: not fake.unacked)
    assert len(fake.envelopes) == 2  # both delivered and acknowledged
    assert records == [[f"slack:{connector.team_id}:{CH}:{ts}"]]  # recorded once
    await quiescent(stack)
    assert len(written(fake, "answer to: hello there")) == 1
    assert len(stack.provider.calls) == 1


async def test_when_the_first_delivery_fails_to_record_the_second_records_it(
        stacks: Any, home: Any, fake: Any) -> None:
    stack = make(stacks, home, fake)
    await stack.start()
    connector = stack.connector
    calls: list[int] = []
    real = connector.submit

    async def first_fails(events: Any, **kw: Any) -> Any:
        calls.append(len(events))
        if len(calls) == 1:
            raise RuntimeError("store unavailable")
        return await real(events, **kw)

    connector.submit = first_fails
    await fake.user_posts(CH, mention("second chance"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: second chance"), within=10)
    assert calls == [1, 1]
    await quiescent(stack)
    assert len(written(fake, "answer to: second chance")) == 1
