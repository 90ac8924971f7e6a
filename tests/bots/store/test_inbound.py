"""The channel layer's inbound log on both stores: record once, claim each event once."""

from __future__ import annotations

import asyncio

from bots.events import InboundEvent
from bots.store.inbound import InboundLog
from bots.store.leases import ThreadLeases
from geode.store import Store, open_store


def _event(n: int, *, channel: str = "-100") -> InboundEvent:
    return InboundEvent(platform="telegram", workspace="42", channel=channel,
                        thread_root=str(n), message_id=str(n), sender="7",
                        dedupe_key=f"telegram:42:{channel}:{n}", text=f"m{n}")


async def test_record_returns_only_new_ids_and_moves_the_cursor(store: Store) -> None:
    log = InboundLog(store=store)
    first = await log.record([(_event(1), "received"), (_event(2), "received")],
                             cursor=("tg", "3"))
    assert len(first) == 2 and first[0] < first[1]
    # a redelivery of 2 next to a new 3: only 3 is new
    again = await log.record([(_event(2), "received"), (_event(3), "received")],
                             cursor=("tg", "4"))
    assert len(again) == 1 and again[0] > first[1]
    assert await log.cursors.get("tg") == "4"
    assert [e.event.text for e in await log.received("telegram", "42")] == ["m1", "m2", "m3"]


async def test_claim_batch_takes_the_oldest_received_up_to_the_limit(store: Store) -> None:
    log = InboundLog(store=store)
    await log.record([(_event(n), "received") for n in range(1, 6)])
    await log.record([(_event(99, channel="-200"), "ignored")])  # decided already
    first = await log.claim_batch("telegram", "42", owner="a", limit=3)
    assert [e.event.text for e in first] == ["m1", "m2", "m3"]
    assert {e.status for e in first} == {"processing"}
    rest = await log.claim_batch("telegram", "42", owner="a", limit=3)
    assert [e.event.text for e in rest] == ["m4", "m5"]
    assert await log.claim_batch("telegram", "42", owner="a", limit=3) == []
    assert await log.claim_batch("telegram", "other-bot", owner="a") == []
    unfinished = await log.unfinished("telegram", "42")
    assert [e.event.text for e in unfinished] == [f"m{n}" for n in range(1, 6)]


async def test_concurrent_claimers_never_share_an_event(store_url: str) -> None:
    # Two stores on one database: two replicas' pumps claiming at the same time.
    a, b = await open_store(store_url), await open_store(store_url, migrate=False)
    try:
        log_a, log_b = InboundLog(store=a), InboundLog(store=b)
        await log_a.record([(_event(n), "received") for n in range(1, 201)])
        claimed: dict[str, list[int]] = {"a": [], "b": []}

        async def pump(name: str, log: InboundLog) -> None:
            while batch := await log.claim_batch("telegram", "42", owner=name, limit=7):
                ids = [e.id for e in batch]
                assert ids == sorted(ids)
                claimed[name] += ids

        await asyncio.gather(pump("a", log_a), pump("b", log_b), pump("a", log_a))
        everything = claimed["a"] + claimed["b"]
        assert len(everything) == len(set(everything)) == 200
    finally:
        await a.aclose()
        await b.aclose()


async def test_record_and_claim_hands_on_the_event_it_was_given_unless_masked(
    store: Store,
) -> None:
    """The intake's record-and-claim hands on the event it recorded as the object it was given
    when the at-rest mask left it as it was (no decode of the row it just wrote); an event
    with a credential in it is read back masked, as stored: the turn sees the mask."""
    log = InboundLog(store=store)
    leases = ThreadLeases(store=store, owner="a", ttl_s=30)
    plain = _event(1)
    pasted = InboundEvent(platform="telegram", workspace="42", channel="-100", thread_root="2",
                          message_id="2", sender="7", dedupe_key="telegram:42:-100:2",
                          text="my key is sk-ant-api03-PASTEDbyTheUser0123456789abcdefXYZ")
    new_ids, claimed = await log.record_and_claim(
        [(plain, "received"), (pasted, "received")], platform="telegram", workspace="42",
        owner="a", leases=leases)
    assert [c.id for c in claimed] == new_ids and len(new_ids) == 2
    assert claimed[0].event is plain and claimed[0].status == "processing"
    assert claimed[1].event is not pasted
    assert "sk-ant" not in claimed[1].event.text and "[REDACTED]" in claimed[1].event.text
    # what the turn would read after a restart is the same value
    assert [e.event for e in await log.unfinished("telegram", "42")] == [
        plain, claimed[1].event]
