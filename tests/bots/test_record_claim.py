"""The intake records an event and, the pump being idle, claims it in the same transaction
(``InboundLog.record_and_claim``): one write transaction instead of two per message. The
state a crash leaves after that commit (the event claimed, undecided) is the one a crash
between the pump's claim and its decision left before: recovery decides it again."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from typing import Any

from _harness import SimulatedCrash

from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import CHAT, finals, settled
from tests.bots.test_exactly_once import answering


def _events(db: str) -> list[tuple[str, str]]:
    """The events' (status, owner), read straight from the file (sync: also from the
    fault seam, which cannot await)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return [(str(s), str(o)) for s, o in
                conn.execute("SELECT status, owner FROM channel_events ORDER BY id")]


async def test_a_crash_right_after_the_record_leaves_the_event_claimed_and_answered_once(
    make_stack: Any, fake: Any
) -> None:
    provider = ScriptedProvider([answering], repeat_last=True)
    hit = asyncio.Event()
    seen: dict[str, Any] = {}
    stack: Any = None

    def fault(point: str) -> None:
        if point == "recorded" and not hit.is_set():
            # what the record's transaction committed, read as the crash happens
            seen["events"] = _events(str(stack.store.url.database))
            seen["owner"] = stack.connector.layer.owner
            hit.set()
            raise SimulatedCrash(point)
        if hit.is_set():  # the process is dead: nothing after the crash may happen
            raise SimulatedCrash(point)

    stack = make_stack(provider=provider, fault=fault)
    await stack.start()
    fake.user_says(CHAT, "@geode_bot crash me", from_user=42)
    await asyncio.wait_for(hit.wait(), 10)
    await stack.crash()
    # recorded AND claimed by this replica in one commit (the pump never ran)
    assert seen["events"] == [("processing", seen["owner"])]
    assert provider.calls == []

    stack.fault = None
    await stack.start()
    await fake.wait_until(lambda: finals(fake, "answer to: crash me"), within=15)
    fake.user_says(CHAT, "@geode_bot after", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: after"), within=15)
    await settled(stack)
    assert len(finals(fake, "answer to: crash me")) == 1
    visible = [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)]
    assert visible.count("answer to: crash me") == 1


async def test_a_redelivered_event_is_refused_and_claims_nothing(make_stack: Any, fake: Any
                                                                   ) -> None:
    stack = make_stack(options={"pump_interval_s": 60.0})
    await stack.start()
    fake.user_says(CHAT, "@geode_bot once", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: once"), within=10)
    await settled(stack)
    layer = stack.connector.layer
    stored = await layer.inbound.get(1)
    assert stored is not None
    # the same update again (a redelivery): refused by its key, nothing claimed or run
    assert await layer.submit([(stored.event, "received")]) == []
    await settled(stack)
    assert _events(str(stack.store.url.database)) == [("done", layer.owner)]
    assert len(finals(fake, "answer to: once")) == 1
