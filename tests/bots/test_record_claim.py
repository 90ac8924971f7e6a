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


async def test_an_event_recorded_during_the_start_take_over_waits_for_the_recovery(
    make_stack: Any, fake: Any, monkeypatch: Any
) -> None:
    """A message recorded while the layer starts (a catch-up) in a thread whose turn a crash
    left unfinished: the intake must not claim it (taking the thread's free lease) before the
    start's take-over, or that take-over would not see the thread and its turn would never be
    recovered. Forced here: the event is submitted from inside the take-over's first call."""
    import dataclasses

    from bots.layer import ChannelLayer
    from tests.bots._harness import crash_at

    provider = ScriptedProvider([answering], repeat_last=True)
    hit, fault = crash_at("turn_started")
    stack = make_stack(provider=provider, fault=fault)
    await stack.start()
    fake.user_says(CHAT, "@geode_bot crash me", from_user=42)
    await asyncio.wait_for(hit.wait(), 10)
    await stack.crash()

    real = ChannelLayer.take_over
    injected: list[list[int]] = []

    async def take_over(self: ChannelLayer) -> None:
        if not injected:
            first = await self.inbound.get(1)
            assert first is not None
            later = dataclasses.replace(first.event, dedupe_key="injected:1",
                                        message_id="999001", text="again")
            injected.append(await self.submit([(later, "received")]))
        await real(self)

    monkeypatch.setattr(ChannelLayer, "take_over", take_over)
    stack.fault = None
    await stack.start()
    await fake.wait_until(lambda: finals(fake, "answer to: crash me")
                          and finals(fake, "answer to: again"), within=15)
    await settled(stack)
    assert injected and len(injected[0]) == 1
    assert len(finals(fake, "answer to: crash me")) == 1
    assert len(finals(fake, "answer to: again")) == 1
