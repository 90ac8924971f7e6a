"""PerChatRateLimiter: when the overall budget is short, answers go before the cosmetic
calls (reactions wait, a "typing" is dropped) instead of queueing behind them."""

from __future__ import annotations

import asyncio
from typing import Any

from bots.telegram.client import PerChatRateLimiter

RATE = 10  # per second: one slot back every 0.1 s


def _limiter() -> tuple[PerChatRateLimiter, list[str]]:
    return PerChatRateLimiter(overall_max_rate=RATE, overall_time_period=1,
                              group_max_rate=0), []


async def _call(limiter: PerChatRateLimiter, sent: list[str], endpoint: str, tag: str,
                chat: int = 7) -> Any:
    async def callback() -> bool:
        sent.append(tag)
        return True

    return await limiter.process_request(callback, (), {}, endpoint, {"chat_id": chat}, None)


async def _exhaust(limiter: PerChatRateLimiter, sent: list[str]) -> None:
    for i in range(RATE):
        await _call(limiter, sent, "sendMessage", f"fill{i}")
    sent.clear()


async def test_an_answer_waiting_for_budget_goes_before_queued_reactions() -> None:
    limiter, sent = _limiter()
    await _exhaust(limiter, sent)
    reactions = [asyncio.create_task(_call(limiter, sent, "setMessageReaction", f"react{i}"))
                 for i in range(3)]
    await asyncio.sleep(0)  # the reactions are waiting first
    answer = asyncio.create_task(_call(limiter, sent, "editMessageText", "answer"))
    await asyncio.gather(answer, *reactions)
    assert sent[0] == "answer", sent
    assert sorted(sent[1:]) == ["react0", "react1", "react2"]


async def test_typing_and_acks_leave_half_the_budget_to_the_first_words() -> None:
    """At 50 chats, neither typing nor the acks spend the budget the first words need:
    typing is dropped, an ack waits (its turn runs beside it) until more than half the
    budget is free again, and the first words that come meanwhile go before it."""
    limiter, sent = _limiter()
    for i in range(RATE // 2):
        await _call(limiter, sent, "sendMessage", f"answer{i}")
    sent.clear()
    assert await _call(limiter, sent, "sendChatAction", "typing") is True
    assert sent == [] and limiter.dropped_typing == 1  # half left: typing is dropped
    ack = asyncio.create_task(_call(limiter, sent, "setMessageReaction", "ack"))
    await asyncio.sleep(0.02)
    assert sent == []  # the ack waits for the budget's first half, never dropped
    await asyncio.wait_for(_call(limiter, sent, "sendMessage", "first words"), 0.05)
    assert sent == ["first words"]  # from the half the ack leaves, at once
    await asyncio.wait_for(ack, 2)
    assert sent == ["first words", "ack"] and limiter.dropped_typing == 1


async def test_typing_is_dropped_while_the_budget_is_short_and_sent_when_it_is_not() -> None:
    limiter, sent = _limiter()
    assert await _call(limiter, sent, "sendChatAction", "typing-free") is True
    assert sent == ["typing-free"]
    await _exhaust(limiter, sent)
    assert await _call(limiter, sent, "sendChatAction", "typing-short") is True
    assert sent == [] and limiter.dropped_typing == 1
    # answers themselves still wait for the budget, never dropped
    assert await _call(limiter, sent, "sendMessage", "answer") is True
    assert sent == ["answer"]


async def test_without_an_overall_limit_nothing_waits_or_is_dropped() -> None:
    limiter = PerChatRateLimiter(overall_max_rate=0, group_max_rate=0)
    sent: list[str] = []
    for i in range(50):
        await _call(limiter, sent, "sendChatAction", f"t{i}")
    assert len(sent) == 50 and limiter.dropped_typing == 0


async def test_waiting_acks_take_turns_instead_of_all_polling_the_budget(monkeypatch) -> None:
    """Acks waiting for the budget's first half go in arrival order, and only the first of
    them looks at the budget each slot: 20 acks under load woke 20 times a slot (at 50
    chats ~1,500 wake-ups a second), now once."""
    limiter, sent = _limiter()
    await _exhaust(limiter, sent)
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def counting_sleep(delay: float, *args: Any) -> Any:
        if delay == limiter._slot_s:
            slept.append(delay)
        return await real_sleep(delay, *args)

    monkeypatch.setattr("bots.telegram.client.asyncio.sleep", counting_sleep)
    acks = [asyncio.create_task(_call(limiter, sent, "setMessageReaction", f"ack{i:02d}"))
            for i in range(20)]
    await asyncio.sleep(0)
    # while they wait, a "typing" is dropped rather than queued behind them
    assert await _call(limiter, sent, "sendChatAction", "typing") is True
    assert "typing" not in sent
    await asyncio.gather(*acks)
    assert sent == [f"ack{i:02d}" for i in range(20)]  # in arrival order, none dropped
    # ~one look a slot (each ack waits for a slot, 6 to refill half): never 20 a slot
    assert len(slept) < 20 * 3, len(slept)
