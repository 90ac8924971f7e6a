"""Per-thread leases on both stores: a thread's events are claimed by one replica at a time,
idle threads are given up, and a dead replica's threads are taken over (with their work)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from sqlalchemy import update

from bots.events import InboundEvent
from bots.store._tables import events_table
from bots.store.inbound import InboundLog
from bots.store.leases import ThreadLeaseLost, ThreadLeases
from geode.store import Store, open_store


def _event(ws: str, thread: int, n: int) -> InboundEvent:
    return InboundEvent(platform="telegram", workspace=ws, channel="-100",
                        thread_root=str(thread), message_id=f"{thread}.{n}", sender="7",
                        dedupe_key=f"telegram:{ws}:-100:{thread}.{n}", text=f"t{thread} m{n}")


def _ws() -> str:
    return uuid.uuid4().hex[:10]  # the PostgreSQL variant shares one database


def _pair(store: Store, *, ttl_a: float = 30) -> tuple[str, InboundLog, ThreadLeases,
                                                      ThreadLeases]:
    """A fresh bot workspace, its inbound log, and the leases of replicas a and b."""
    return (_ws(), InboundLog(store=store), ThreadLeases(store=store, owner="a", ttl_s=ttl_a),
            ThreadLeases(store=store, owner="b", ttl_s=30))


async def _finish(store: Store, ids: list[int]) -> None:
    stmt = update(events_table).where(events_table.c.id.in_(ids)).values(status="done")
    await store.run_write(lambda conn: conn.execute(stmt))


async def test_a_held_thread_is_claimed_by_its_holder_only(store: Store) -> None:
    ws, log, a, b = _pair(store)
    await log.record([(_event(ws, 1, 1), "received"), (_event(ws, 2, 1), "received")])
    first = await log.claim_batch("telegram", ws, owner="a", leases=a)
    assert [e.event.text for e in first] == ["t1 m1", "t2 m1"]
    assert await a.holders("telegram", ws) == {("-100", "1"): "a", ("-100", "2"): "a"}

    await log.record([(_event(ws, 1, 2), "received"), (_event(ws, 3, 1), "received")])
    # b may take the new thread 3, never a's thread 1 (its event waits for a)
    assert [e.event.text for e in await log.claim_batch("telegram", ws, owner="b",
                                                         leases=b)] == ["t3 m1"]
    # at capacity a takes no new thread, but keeps claiming its own
    await log.record([(_event(ws, 4, 1), "received")])
    mine = await log.claim_batch("telegram", ws, owner="a", leases=a, new_threads=0)
    assert a.skipped == 1  # thread 4 is free, but a has no room
    assert [e.event.text for e in mine] == ["t1 m2"]
    assert [e.event.text for e in await log.claim_batch("telegram", ws, owner="a",
                                                         leases=a)] == ["t4 m1"]
    assert await log.claim_batch("telegram", ws, owner="b", leases=b) == []


async def test_idle_threads_are_released_only_when_nothing_is_unfinished(store: Store) -> None:
    ws = _ws()
    log = InboundLog(store=store)
    a = ThreadLeases(store=store, owner="a", ttl_s=0.05)
    await log.record([(_event(ws, 1, 1), "received"), (_event(ws, 2, 1), "received")])
    claimed = await log.claim_batch("telegram", ws, owner="a", leases=a)
    await asyncio.sleep(0.1)
    assert await a.renew("telegram", ws) == {("-100", "1"), ("-100", "2")}
    await _finish(store, [claimed[0].id])  # thread 1 is done, thread 2 still processing
    assert await a.release_idle("telegram", ws) == 1
    assert await a.holders("telegram", ws) == {("-100", "2"): "a"}
    # a released thread is free: anyone may take it with its next event
    b = ThreadLeases(store=store, owner="b", ttl_s=30)
    await log.record([(_event(ws, 1, 2), "received")])
    assert [e.event.text for e in await log.claim_batch("telegram", ws, owner="b",
                                                         leases=b)] == ["t1 m2"]


async def test_a_dead_replicas_threads_are_taken_over_after_expiry(store: Store) -> None:
    ws, log, a, b = _pair(store, ttl_a=0.2)
    await log.record([(_event(ws, 1, 1), "received")])
    assert await log.claim_batch("telegram", ws, owner="a", leases=a)
    assert await b.take_over("telegram", ws) == set()  # a is alive
    await asyncio.sleep(0.3)  # a stops renewing
    await log.record([(_event(ws, 1, 2), "received")])
    # an expired lease is not taken by a claim (the work it left must be recovered first)
    assert await log.claim_batch("telegram", ws, owner="b", leases=b) == []
    assert await b.take_over("telegram", ws) == {("-100", "1")}
    assert await a.renew("telegram", ws) == set()  # a learns it lost the thread
    assert await log.claim_batch("telegram", ws, owner="a", leases=a) == []
    assert [e.event.text for e in await log.claim_batch("telegram", ws, owner="b",
                                                         leases=b)] == ["t1 m2"]


async def test_released_threads_with_unfinished_work_are_taken_over(store: Store) -> None:
    ws = _ws()
    log = InboundLog(store=store)
    a = ThreadLeases(store=store, owner="a", ttl_s=30)
    b = ThreadLeases(store=store, owner="b", ttl_s=30)
    await log.record([(_event(ws, n, 1), "received") for n in (1, 2)])
    claimed = await log.claim_batch("telegram", ws, owner="a", leases=a)
    await _finish(store, [claimed[1].id])
    await a.release_all("telegram", ws)  # a clean stop with thread 1 unfinished
    assert await a.holders("telegram", ws) == {}
    assert await b.take_over("telegram", ws) == {("-100", "1")}
    assert await b.take_over("telegram", ws) == set()  # held now, by b


async def test_concurrent_claimers_never_split_a_thread(store_url: str) -> None:
    # Two stores on one database: two replicas' pumps claiming at the same time.
    ws = _ws()
    a, b = await open_store(store_url), await open_store(store_url, migrate=False)
    try:
        log_a, log_b = InboundLog(store=a), InboundLog(store=b)
        await log_a.record([(_event(ws, n % 13, n), "received") for n in range(1, 201)])
        leases = {"a": ThreadLeases(store=a, owner="a", ttl_s=30),
                  "b": ThreadLeases(store=b, owner="b", ttl_s=30)}
        claimed: dict[str, list[int]] = {"a": [], "b": []}
        threads: dict[str, set[str]] = {"a": set(), "b": set()}

        async def claim(name: str, log: InboundLog) -> int:
            batch = await log.claim_batch("telegram", ws, owner=name, limit=7,
                                          leases=leases[name])
            claimed[name] += [e.id for e in batch]
            threads[name] |= {e.event.thread_root for e in batch}
            return len(batch)

        async def pump(name: str, log: InboundLog) -> None:
            while len(claimed["a"]) + len(claimed["b"]) < 200:
                if not await claim(name, log):
                    await asyncio.sleep(0.001)  # the rest are the other's threads

        # each holds some threads before both race for the rest
        assert await claim("a", log_a) == 7 and await claim("b", log_b) == 7
        async with asyncio.timeout(60):
            await asyncio.gather(pump("a", log_a), pump("b", log_b), pump("a", log_a))
        everything = claimed["a"] + claimed["b"]
        assert len(everything) == len(set(everything)) == 200
        assert threads["a"] and threads["b"]
        assert not threads["a"] & threads["b"]
        assert threads["a"] | threads["b"] == {str(n) for n in range(13)}
    finally:
        await a.aclose()
        await b.aclose()


async def test_another_replicas_backlog_does_not_hide_free_threads(store: Store) -> None:
    ws = _ws()
    log = InboundLog(store=store)
    a = ThreadLeases(store=store, owner="a", ttl_s=30)
    b = ThreadLeases(store=store, owner="b", ttl_s=30)
    await log.record([(_event(ws, 1, 0), "received")])
    assert await log.claim_batch("telegram", ws, owner="a", leases=a)
    # a's thread 1 piles up (a long turn runs there), then thread 2 starts
    await log.record([(_event(ws, 1, n), "received") for n in range(1, 11)])
    await log.record([(_event(ws, 2, 1), "received")])
    batch = await log.claim_batch("telegram", ws, owner="b", limit=5, leases=b)
    assert [e.event.text for e in batch] == ["t2 m1"]


async def test_lease_times_are_the_stores_clock_not_the_replicas(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = _ws()
    log = InboundLog(store=store)
    a = ThreadLeases(store=store, owner="a", ttl_s=30)
    b = ThreadLeases(store=store, owner="b", ttl_s=30)
    await log.record([(_event(ws, 1, 1), "received")])
    assert await log.claim_batch("telegram", ws, owner="a", leases=a)
    # b's host clock runs an hour ahead: a's live lease must not look expired to it
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    assert await b.take_over("telegram", ws) == set()
    assert await a.holders("telegram", ws) == {("-100", "1"): "a"}


async def test_a_thread_taken_meanwhile_leaves_its_room_to_the_next(store: Store) -> None:
    # b saw threads 1 and 2 free, but a took 1 before b's insert: b's one slot goes to 2.
    ws = _ws()
    a = ThreadLeases(store=store, owner="a", ttl_s=30)
    b = ThreadLeases(store=store, owner="b", ttl_s=30)
    one, two, three = ("-100", "1"), ("-100", "2"), ("-100", "3")
    await store.run_write(lambda conn: a.take_in(conn, "telegram", ws, [one], new=1))
    held = await store.run_write(
        lambda conn: b.take_in(conn, "telegram", ws, [one, two, three], new=1))
    assert held == {two} and b.skipped == 1
    assert await a.holders("telegram", ws) == {one: "a", two: "b"}


async def test_the_fence_passes_for_the_holder_only(store: Store) -> None:
    ws, log, a, b = _pair(store)
    await log.record([(_event(ws, 1, 1), "received")])
    await log.claim_batch("telegram", ws, owner="a", leases=a)

    await store.run_write(lambda conn: a.check_held(conn, "telegram", ws, ("-100", "1")))
    with pytest.raises(ThreadLeaseLost, match="held by a"):
        await store.run_write(lambda conn: b.check_held(conn, "telegram", ws, ("-100", "1")))
    with pytest.raises(ThreadLeaseLost, match="held by nobody"):
        await store.run_write(lambda conn: a.check_held(conn, "telegram", ws, ("-100", "2")))
