"""A streamed draft that outgrows the platform's message limit goes on in a new message (a
real daemon and Telegram connector against the wire-level fake): the first message is
finished with its part, the stream continues below it, each page is recorded on the turn's
outbox row, and the final answer is those messages, once; a page the final answer does not
fill (the draft shrank: a retried call) is removed, never left beside the answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from bots.telegram.format import chunk_markdown
from bots.testing._telegram_html import parse_telegram_html
from bots.testing.telegram import FakeTelegramServer
from bots.turn.stream import draft_pages
from geode.errors import ModelError
from geode.messages import StreamEvent
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import CHAT, Stack, settled

PROSE = " ".join(f"**word{i}** plain{i}" for i in range(40))
CODE = "\n".join(f"line_{i} = {i} * 2  # a comment to make it long" for i in range(60))
#: ~9,500 characters: three Telegram messages, a code block across the first boundary
LONG = "\n\n".join([PROSE] * 5 + [f"```python\n{CODE}\n```"] + [PROSE] * 4 + ["The end."])


class _Streaming(ScriptedProvider):
    """The scripted answer streamed ``piece`` characters at a time; with ``cut_after``, the
    first call streams that much and fails (retryable): the retry streams the answer."""

    def __init__(self, text: str, *, piece: int = 400, every_s: float = 0.02,
                 first: str = "") -> None:
        super().__init__([text], repeat_last=True)
        self.piece, self.every_s, self.first = piece, every_s, first
        self.streams = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.streams += 1
        if self.first and self.streams == 1:
            for i in range(0, len(self.first), self.piece):
                await asyncio.sleep(self.every_s)
                yield StreamEvent(kind="text_delta", text=self.first[i:i + self.piece])
            await asyncio.sleep(0.3)  # its pages are shown before the call fails
            raise ModelError("cut mid-stream", kind="transient")
        response = await self.complete(request)
        text = response.message.text
        for i in range(0, len(text), self.piece):
            await asyncio.sleep(self.every_s)
            yield StreamEvent(kind="text_delta", text=text[i:i + self.piece])
        yield StreamEvent(kind="done", response=response)


def _options() -> dict[str, Any]:
    return {"stream": True, "progress_after_ms": 0, "progress_edit_interval_s": 0.05}


def test_pages_are_the_final_split_and_valid_markup_at_every_cut() -> None:
    """The draft's pages before the last are the final answer's chunks (same splitter), and
    every prefix of the answer splits into pages that are each valid markup."""
    from bots.turn.stream import closed_markdown

    final = chunk_markdown(LONG)
    assert len(final) == 3
    for cut in range(200, len(LONG), 397):
        pages = draft_pages("⏳ Working… 3s", closed_markdown(LONG[:cut]), chunk_markdown)
        for page in pages:
            parse_telegram_html(page.formatted)  # raises on broken markup
        if len(pages) > 1:
            assert all(p.formatted.strip() for p in pages)
    done = draft_pages("⏳ Working… 9s", LONG, chunk_markdown)
    assert [p.formatted for p in done] == [c.formatted for c in final]


async def test_a_long_draft_goes_on_in_new_messages_and_becomes_the_answer(
        make_stack: Any, fake: FakeTelegramServer) -> None:
    stack: Stack = make_stack(provider=_Streaming(LONG), options=_options())
    await stack.start()
    fake.user_says(CHAT, "@geode_bot write a lot", from_user=42)
    final = chunk_markdown(LONG)
    expected = [parse_telegram_html(c.formatted)[0] for c in final]
    await fake.wait_until(lambda: [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)]
                          == expected, within=30)
    await settled(stack)
    visible = fake.messages_in(CHAT, from_bot=True)
    assert [m.plain_text for m in visible] == expected
    sends = [c for c in fake.calls if c.method == "sendMessage"]
    # the progress message, then one page each time the draft outgrew the last: sent while
    # it streamed (with answer text, not the deliverer's "…" placeholder)
    assert len(sends) == len(final)
    assert all(s.params.get("text") not in ("…", None) for s in sends[1:])
    # every draft parsed (the fake refuses broken markup); the only refused edits are the
    # final answer's "not modified" on pages that already held their final part
    refused = [c for c in fake.calls if c.method == "editMessageText" and c.status != 200]
    assert all(c.params.get("text") in {p.formatted for p in final} for c in refused)
    assert len(refused) >= 2  # the finished pages were already the answer's
    # no page left behind: every page was recorded, so the deliverer sent no placeholder
    assert not any(m.plain_text.startswith("⏳") for m in visible)


async def test_pages_the_answer_does_not_fill_are_removed(
        make_stack: Any, fake: FakeTelegramServer) -> None:
    short = "The short answer, after all."
    stack: Stack = make_stack(provider=_Streaming(short, first=LONG), options=_options())
    await stack.start()
    fake.user_says(CHAT, "@geode_bot write a lot", from_user=42)
    await fake.wait_until(lambda: [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)]
                          == [short], within=30)
    await settled(stack)
    sends = [c for c in fake.calls if c.method == "sendMessage"]
    assert len(sends) == 3  # the progress message and two pages of the cut draft
    assert len(fake.deleted) == 2  # both pages removed once the short answer landed
    assert [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)] == [short]
