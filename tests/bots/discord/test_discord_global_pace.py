"""GlobalPace, the bot's one budget of requests a second: while it is short, a new message
goes before edits and those before typing and acks, which also leave three quarters of it
to the others; within a rank, first come first served (a stale draft edit queued before the final
answer's goes first)."""

from __future__ import annotations

import asyncio

from bots.discord._gateway import COSMETIC, COSMETIC_LEAVES, EDIT, SEND, GlobalPace

PER_S = 10
#: what typing and acks may take of a second's budget while nothing else waits (3 of 10)
SHARE = PER_S - int(PER_S * COSMETIC_LEAVES)


async def _take(pace: GlobalPace, order: list[str], tag: str, rank: int) -> None:
    await pace.take(rank)
    order.append(tag)


async def test_a_new_message_goes_before_edits_and_typing_waiting_for_the_budget() -> None:
    pace = GlobalPace(PER_S)
    for _ in range(PER_S):
        await pace.take(SEND)  # the second's budget is spent
    order: list[str] = []
    tasks = [asyncio.create_task(_take(pace, order, "typing", COSMETIC)),
             asyncio.create_task(_take(pace, order, "draft edit", EDIT)),
             asyncio.create_task(_take(pace, order, "final edit", EDIT))]
    await asyncio.sleep(0.05)  # they wait, in that order
    tasks.append(asyncio.create_task(_take(pace, order, "first message", SEND)))
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert order == ["first message", "draft edit", "final edit", "typing"]


async def test_typing_and_acks_leave_most_of_the_budget_to_the_first_messages() -> None:
    assert 0 < SHARE < PER_S // 2
    pace = GlobalPace(PER_S)
    order: list[str] = []
    acks = [asyncio.create_task(_take(pace, order, f"ack{i}", COSMETIC))
            for i in range(PER_S)]
    await asyncio.sleep(0.05)
    assert order == [f"ack{i}" for i in range(SHARE)]  # their share went, the rest wait
    for i in range(PER_S - SHARE):  # the first messages take the rest at once
        await asyncio.wait_for(_take(pace, order, f"message{i}", SEND), 0.05)
    await asyncio.wait_for(asyncio.gather(*acks), 5)
    assert order[SHARE:PER_S] == [f"message{i}" for i in range(PER_S - SHARE)]
    assert order[PER_S:] == [f"ack{i}" for i in range(SHARE, PER_S)]


async def test_without_a_limit_nothing_waits() -> None:
    pace = GlobalPace(0)
    for rank in (SEND, EDIT, COSMETIC) * 20:
        await asyncio.wait_for(pace.take(rank), 0.05)
