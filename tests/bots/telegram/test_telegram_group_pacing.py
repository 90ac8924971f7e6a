"""Streamed answers in Telegram groups are paced by the group's budget (Telegram allows a group
about 20 messages a minute, edits included) as well as the bot's overall one: against a fake
that answers 429 past either budget, many streaming threads get none, and every final answer
is exact. The group budget runs on a faster clock here (a few messages per few seconds) so
that it binds within a short test; the algorithm is the one of the minute-long default."""

from __future__ import annotations

import asyncio
import functools
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

import bots.telegram.connector as telegram_connector
from bots.telegram.client import PerChatRateLimiter
from bots.testing.telegram import FakeTelegramServer
from tests.bots.conftest import TOKEN, Stack, binding, settled, store_url_for
from tests.bots.test_streaming import _Streaming

#: the group budget of these tests: GROUP_LIMIT messages per GROUP_PERIOD_S seconds
GROUP_LIMIT = 4
GROUP_PERIOD_S = 4.0
ANSWER = ("word " * 14).strip()


def _fast_group_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The connector's limiter counts the group budget per GROUP_PERIOD_S, not per minute."""
    monkeypatch.setattr(telegram_connector, "PerChatRateLimiter", functools.partial(
        PerChatRateLimiter, group_time_period=GROUP_PERIOD_S))


async def _serve(fake: FakeTelegramServer, chats: list[int], said: list[tuple[int, str]],
                 *, within: float, every_s: float = 0.1) -> list[Any]:
    """A real daemon and connector streaming answers to ``said`` in ``chats`` (a piece
    every ``every_s``); the bot's visible messages of each chat once every answer landed."""
    home = Path(tempfile.mkdtemp(prefix="gb-", dir="/tmp"))
    stack = Stack(home=home, fake=fake, provider=_Streaming(ANSWER, piece=7, every_s=every_s),
                  bindings=[binding(c) for c in chats], store_url=store_url_for(home),
                  options={"stream": True, "progress_after_ms": 0,
                           "progress_edit_interval_s": 0.2, "rate_overall_per_s": 20,
                           "rate_group_per_min": GROUP_LIMIT})
    try:
        await stack.start()
        for chat, text in said:
            fake.user_says(chat, f"@geode_bot {text}", from_user=42)

        def answered() -> bool:
            return sum(m.plain_text == ANSWER for c in chats
                       for m in fake.messages_in(c, from_bot=True)) == len(said)

        await fake.wait_until(answered, within=within)
        await settled(stack, within=30)
        return [fake.messages_in(c, from_bot=True) for c in chats]
    finally:
        await stack.stop()
        shutil.rmtree(home, ignore_errors=True)


async def test_fifty_streaming_groups_get_no_429_and_exact_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fast_group_clock(monkeypatch)
    chats = [-1009000 - i for i in range(50)]
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot", flood_per_s=30,
                                  group_limit=GROUP_LIMIT,
                                  group_period_s=GROUP_PERIOD_S) as fake:
        # ~5 s answers: the 50 first messages and 50 answers alone spend 5 s of the 20-a-second
        # budget, and drafts go only with what the answers leave
        shown = await _serve(fake, chats, [(c, f"n{c}") for c in chats], within=120,
                             every_s=0.5)
    assert fake.flooded == 0, fake.group_flooded
    assert all(not c.status or c.status == 200 for c in fake.calls
               if c.method in ("sendMessage", "editMessageText")), "a 429 was answered"
    # one message per group, the exact answer: the drafts were edits of it
    assert [[m.plain_text for m in msgs] for msgs in shown] == [[ANSWER]] * len(chats)
    edits = [c for c in fake.calls if c.method == "editMessageText"]
    drafts = [c for c in edits if str(c.params.get("text", "")).startswith("⏳")]
    assert drafts, "no draft was shown: nothing streamed"


async def test_threads_of_one_group_share_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    _fast_group_clock(monkeypatch)
    chat = -1008000
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot",
                                  group_limit=GROUP_LIMIT,
                                  group_period_s=GROUP_PERIOD_S) as fake:
        shown = await _serve(fake, [chat], [(chat, f"t{i}") for i in range(5)], within=90)
    assert fake.flooded == 0, fake.group_flooded
    # five threads, five messages (each its thread's progress message turned answer)
    assert [m.plain_text for m in shown[0]] == [ANSWER] * 5
    counted = [c for c in fake.calls if c.method in ("sendMessage", "editMessageText")]
    # unpaced, each thread would have edited its draft every 0.2 s of a 1.4 s answer
    assert len(counted) < 5 * 8, len(counted)


def _limiter() -> PerChatRateLimiter:
    return PerChatRateLimiter(overall_max_rate=0, group_max_rate=GROUP_LIMIT * 2,
                              group_time_period=60)


async def _edit(limiter: PerChatRateLimiter, chat: int, sent: list[int]) -> None:
    async def callback() -> bool:
        sent.append(chat)
        return True

    await limiter.process_request(callback, (), {}, "editMessageText", {"chat_id": chat}, None)


async def test_edits_in_a_group_draw_from_its_budget_and_drafts_yield_to_answers() -> None:
    limiter, sent = _limiter(), []
    group, other, private = -100555, -100666, 42
    assert not limiter.group_busy(str(group))
    # 8 a minute: a bucket of 7 (one kept back as a margin); drafts leave the last 3
    for _ in range(GROUP_LIMIT):
        await _edit(limiter, group, sent)
    assert limiter.group_busy(str(group))  # a draft now leaves the rest to the answers
    assert not limiter.group_busy(str(other)) and not limiter.group_busy(str(private))
    for _ in range(GROUP_LIMIT - 1):
        await _edit(limiter, group, sent)  # answers still go, until the bucket is full
    blocked = asyncio.create_task(_edit(limiter, group, sent))
    await asyncio.sleep(0.05)
    assert not blocked.done()  # the group's budget is spent: the edit waits for it
    await _edit(limiter, other, sent)  # another group's is its own
    await _edit(limiter, private, sent)  # and a private chat has none
    assert sent[-2:] == [other, private]
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked
