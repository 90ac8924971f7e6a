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


async def test_reactions_leave_half_the_budget_to_the_answers() -> None:
    """50 chats' acks at once must not spend the burst their first words need a moment
    later: a reaction waits once less than half the budget is left; an answer does not."""
    limiter, sent = _limiter()
    for i in range(RATE // 2):
        await _call(limiter, sent, "setMessageReaction", f"react{i}")
    assert len(sent) == RATE // 2  # half the budget: the reactions went at once
    sent.clear()
    late = asyncio.create_task(_call(limiter, sent, "setMessageReaction", "late"))
    await asyncio.sleep(0.02)  # less than one slot's refill (0.1 s)
    assert sent == []  # the reaction waits for the budget's first half ...
    for i in range(RATE // 2 - 1):  # ... which the answers may all take at once
        await asyncio.wait_for(_call(limiter, sent, "sendMessage", f"answer{i}"), 0.05)
    assert sent == [f"answer{i}" for i in range(RATE // 2 - 1)]
    await late  # and it goes once the budget refilled
    assert sent[-1] == "late"


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
