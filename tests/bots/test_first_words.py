"""A streamed answer's first words do not wait out ``progress_after_ms``: once the model's
text streams, the progress message (carrying the words so far) is due
``FIRST_WORDS_AFTER_S`` later, while an answer complete before that is still the only
message (a real daemon and Telegram connector against the wire-level fake)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from bots.testing.telegram import FakeTelegramServer
from bots.turn.run import FIRST_WORDS_AFTER_S
from geode.messages import StreamEvent
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import CHAT, Stack, finals, settled

WORDS = [f"word{i} " for i in range(12)]
_SHOWN = {"sendMessage", "editMessageText", "sendMessageDraft", "setMessageReaction"}


class _Paced(ScriptedProvider):
    """Streams ``pieces`` of the answer, ``every_s`` apart (the first at once)."""

    def __init__(self, pieces: list[str], *, every_s: float) -> None:
        super().__init__(["".join(pieces)], repeat_last=True)
        self.pieces, self.every_s = pieces, every_s

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        response = await self.complete(request)
        for i, piece in enumerate(self.pieces):
            if i:
                await asyncio.sleep(self.every_s)
            yield StreamEvent(kind="text_delta", text=piece)
        yield StreamEvent(kind="done", response=response)


async def test_streamed_words_show_before_progress_after_ms(
        make_stack: Any, fake: FakeTelegramServer) -> None:
    # 12 pieces 0.25 s apart: the answer takes ~2.75 s, far less than progress_after_ms
    # (which alone would make it a quick answer: no message before the final one)
    stack: Stack = make_stack(provider=_Paced(WORDS, every_s=0.25), options={
        "stream": True, "progress_after_ms": 60_000, "progress_edit_interval_s": 0.05})
    await stack.start()
    fake.user_says(CHAT, "@geode_bot talk", from_user=42)
    await fake.wait_until(lambda: any("word11" in m.plain_text and not m.plain_text.startswith(
        "⏳") for m in fake.sent), within=20)
    await settled(stack)
    sent = [m.plain_text for m in fake.sent]
    # the first message was the draft under the heartbeat, with the words so far ...
    assert sent[0].startswith("⏳ Working") and "word0" in sent[0], sent
    assert "word11" not in sent[0]
    # ... and the final answer replaced it: one message left, the answer
    final = fake.messages_in(CHAT, from_bot=True)
    assert [m.plain_text for m in final] == ["".join(WORDS).strip()]


async def test_an_answer_streamed_whole_within_the_delay_is_the_only_message(
        make_stack: Any, fake: FakeTelegramServer) -> None:
    pieces = ["quick ", "streamed ", "answer"]
    every = FIRST_WORDS_AFTER_S / 30  # all of it well within the first-words delay
    stack: Stack = make_stack(provider=_Paced(pieces, every_s=every), options={
        "stream": True, "progress_after_ms": 60_000})
    await stack.start()
    fake.user_says(CHAT, "@geode_bot quick?", from_user=42)
    await fake.wait_until(lambda: finals(fake, "quick streamed answer"), within=10)
    await settled(stack)
    assert [c.method for c in fake.calls if c.method in _SHOWN] == [
        "setMessageReaction", "sendMessage"]


async def test_a_held_back_ack_holds_back_neither_the_turn_nor_its_answer(
        make_stack: Any, fake: FakeTelegramServer) -> None:
    """The 👀 reaction goes beside the turn: Telegram holding it (a budget spent by other
    chats, a slow answer) delays neither the model call nor the answer, and the ack still
    lands once it is let through."""
    release, reacted = asyncio.Event(), asyncio.Event()
    real = fake._set_message_reaction

    async def held(params: Any) -> bool:
        await release.wait()
        try:
            return await real(params)
        finally:
            reacted.set()

    fake._set_message_reaction = held  # type: ignore[method-assign]
    stack: Stack = make_stack(provider=_Paced(["an ", "answer"], every_s=0.01), options={
        "stream": True, "progress_after_ms": 60_000})
    await stack.start()
    fake.user_says(CHAT, "@geode_bot hello", from_user=42)
    await fake.wait_until(lambda: finals(fake, "an answer"), within=10)
    assert not reacted.is_set()  # the answer came while the ack was still held
    release.set()
    await asyncio.wait_for(reacted.wait(), 10)
    await settled(stack)
    assert [c.method for c in fake.calls if c.method in _SHOWN] == [
        "setMessageReaction", "sendMessage"]  # asked first; one message, the answer
    assert [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)] == ["an answer"]
