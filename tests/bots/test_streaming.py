"""Answers that stream into the progress message, and quick answers that need none (a real
daemon and Telegram connector against the wire-level fake; the draft's markdown closing on
its own)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from bots.events import ReplyTarget
from bots.format import Chunk
from bots.telegram.format import chunk_markdown
from bots.testing._telegram_html import parse_telegram_html
from bots.testing.telegram import FakeTelegramServer
from bots.turn import ProgressReporter
from bots.turn.stream import closed_markdown
from geode.loop.events import ModelResponded, TextDelta, VerifyFailed
from geode.messages import StreamEvent
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import CHAT, TOKEN, Stack, binding, finals, settled, store_url_for

ANSWER = ("Here is **bold text that spans several pieces** of the answer.\n\n"
          "```python\nprint('hi')\nx = 1\n```\n\nDone **now**.")
_SHOWN = {"sendMessage", "editMessageText", "sendMessageDraft"}


class _Streaming(ScriptedProvider):
    """The scripted answer, streamed a few characters at a time."""

    def __init__(self, text: str, *, piece: int = 6, every_s: float = 0.03) -> None:
        super().__init__([text], repeat_last=True)
        self.piece, self.every_s = piece, every_s

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        response = await self.complete(request)
        text = response.message.text
        for i in range(0, len(text), self.piece):
            await asyncio.sleep(self.every_s)
            yield StreamEvent(kind="text_delta", text=text[i:i + self.piece])
        yield StreamEvent(kind="done", response=response)


def _shown_calls(fake: FakeTelegramServer) -> list[str]:
    return [c.method for c in fake.calls if c.method in _SHOWN | {"setMessageReaction"}]


# -- the draft's markup -------------------------------------------------------------------------

def test_every_prefix_of_an_answer_renders_as_valid_markup() -> None:
    for end in range(1, len(ANSWER) + 1):
        closed = closed_markdown(ANSWER[:end])
        for chunk in chunk_markdown(closed):
            parse_telegram_html(chunk.formatted)  # raises on broken HTML
    assert closed_markdown("a **bo") == "a **bo**"
    assert closed_markdown("```py\nx = 1") == "```py\nx = 1\n```"
    assert closed_markdown("```\nx\n```\nthen `co") == "```\nx\n```\nthen `co`"


# -- quick answers ----------------------------------------------------------------------------

async def test_a_quick_answer_is_the_only_message(make_stack: Any,
                                                  fake: FakeTelegramServer) -> None:
    stack: Stack = make_stack(options={"stream": True, "progress_after_ms": 1000})
    await stack.start()
    fake.user_says(CHAT, "@geode_bot quick?", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: quick?"), within=10)
    await settled(stack)
    # the ack reaction and the answer: no "Working…" sent and then edited
    assert _shown_calls(fake) == ["setMessageReaction", "sendMessage"]
    assert [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)] == ["answer to: quick?"]


async def test_progress_after_zero_keeps_the_progress_message(make_stack: Any,
                                                              fake: FakeTelegramServer) -> None:
    stack: Stack = make_stack(options={"stream": False, "progress_after_ms": 0})
    await stack.start()
    fake.user_says(CHAT, "@geode_bot slow?", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: slow?"), within=10)
    await settled(stack)
    assert _shown_calls(fake) == ["setMessageReaction", "sendMessage", "editMessageText"]
    assert fake.sent[0].plain_text.startswith("⏳ Working")


# -- streaming ---------------------------------------------------------------------------------

async def test_the_answer_grows_in_the_progress_message(make_stack: Any,
                                                        fake: FakeTelegramServer) -> None:
    stack: Stack = make_stack(provider=_Streaming(ANSWER), options={
        "stream": True, "progress_after_ms": 0, "progress_edit_interval_s": 0.05})
    await stack.start()
    fake.user_says(CHAT, "@geode_bot explain", from_user=42)
    await fake.wait_until(lambda: any("Done now." in m.plain_text and not
                                      m.plain_text.startswith("⏳") for m in fake.sent),
                          within=15)
    await settled(stack)
    edits = [c for c in fake.calls if c.method == "editMessageText"]
    assert edits and all(c.status == 200 for c in edits), [c.status for c in edits]
    drafts = [m.plain_text for m in fake.sent if m.plain_text.startswith("⏳ Working")]
    bodies = [d.split("\n", 1)[1] for d in drafts if "\n" in d]
    # it grew piece by piece: a draft inside the bold, one inside the code block
    assert any("bold text" in b and "pieces" not in b for b in bodies), bodies
    assert any("print('hi')" in b and "Done" not in b for b in bodies), bodies
    # each draft parsed as Telegram HTML (the fake refuses broken markup) and had the bold
    # and the code block as entities, not as stray asterisks or backticks
    assert not any("**" in b or "```" in b for b in bodies), bodies
    final = fake.messages_in(CHAT, from_bot=True)
    assert len(final) == 1 and final[0].plain_text.startswith("Here is bold text")
    assert final[0].plain_text.endswith("Done now.")


async def test_fifty_streaming_threads_get_no_429() -> None:
    import shutil
    import tempfile
    from pathlib import Path

    home = Path(tempfile.mkdtemp(prefix="gb-", dir="/tmp"))
    # the fake refuses more than 30 shown messages a second, like the Bot API's flood control.
    # The answers take ~5 s: the 50 progress messages and 50 answers alone spend 5 s of the
    # 20-a-second budget, and drafts go only with what the answers leave
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot",
                                  flood_per_s=30) as fake:
        stack = Stack(home=home, fake=fake, provider=_Streaming("word " * 12, piece=10,
                                                                every_s=0.8),
                      bindings=[binding()], store_url=store_url_for(home), options={
                          "stream": True, "progress_after_ms": 0,
                          "progress_edit_interval_s": 0.2, "rate_overall_per_s": 20})
        try:
            await stack.start()
            mids = [fake.message_id_for(fake.user_says(CHAT, f"@geode_bot n{i}", from_user=42))
                    for i in range(50)]
            answer = ("word " * 12).strip()
            await fake.wait_until(lambda: len([m for m in fake.messages_in(CHAT, from_bot=True)
                                               if m.plain_text == answer]) == 50, within=90)
            await settled(stack, within=30)
            visible = fake.messages_in(CHAT, from_bot=True)
        finally:
            await stack.stop()
            shutil.rmtree(home, ignore_errors=True)
    assert fake.flooded == 0
    assert sorted(m.reply_to_message_id or 0 for m in visible) == sorted(mids)
    assert all(m.plain_text == answer for m in visible)
    assert len([c for c in fake.calls if c.method == "editMessageText"]) > 50  # it streamed


async def test_a_private_chat_previews_the_answer_with_message_drafts(
    make_stack: Any, fake: FakeTelegramServer
) -> None:
    stack: Stack = make_stack(provider=_Streaming(ANSWER), bindings=[binding(42)], options={
        "stream": True, "progress_after_ms": 0, "progress_edit_interval_s": 0.05})
    await stack.start()
    fake.user_says(42, "explain", from_user=42, chat_type="private")
    await fake.wait_until(lambda: any(m.plain_text.endswith("Done now.")
                                      for m in fake.messages_in(42, from_bot=True)), within=15)
    await settled(stack)
    # the draft went out as sendMessageDraft previews of the progress message (its id as
    # the draft id), growing; the chat itself holds only the answer
    texts = [t for chat, _draft, t in fake.drafts if chat == 42]
    assert len(texts) >= 2 and all(t.startswith("⏳ Working") for t in texts), texts
    assert len({d for _c, d, _t in fake.drafts}) == 1
    assert all(c.status == 200 for c in fake.calls if c.method == "sendMessageDraft")
    assert [m.plain_text.endswith("Done now.") for m in fake.messages_in(42, from_bot=True)] \
        == [True]
    edits = [c for c in fake.calls if c.method == "editMessageText"]
    assert len(edits) == 1  # only the final answer replaced the progress message


# -- a refused draft ----------------------------------------------------------------------------

class _Client:
    platform = "fake"

    def __init__(self) -> None:
        self.shown: list[str] = []

    async def react(self, target: ReplyTarget, message_id: str, emoji: str) -> None:
        pass

    async def send(self, target: ReplyTarget, chunk: Chunk) -> str:
        self.shown.append(chunk.fallback)
        return "m1"

    async def edit(self, target: ReplyTarget, message_id: str, chunk: Chunk) -> None:
        self.shown.append(chunk.fallback)

    async def typing(self, target: ReplyTarget) -> None:
        pass

    def render_progress(self, text: str) -> Chunk:
        return Chunk(formatted=text, fallback=text)

    def render(self, markdown: str) -> list[Chunk]:
        return [Chunk(formatted=markdown, fallback=markdown)]


class _Outbox:
    async def record_progress_message(self, row: Any, message_id: str) -> None:
        pass


class _Row:
    progress_message_id: str | None = None
    message_ids: list[str] = []


async def _until_shown(client: _Client, text: str) -> None:
    async with asyncio.timeout(5):
        while not client.shown or text not in client.shown[-1]:
            await asyncio.sleep(0.01)


async def test_a_draft_the_verifier_refused_leaves_the_message() -> None:
    client = _Client()
    progress = ProgressReporter(
        client=client, outbox=_Outbox(), row=_Row(),  # type: ignore[arg-type]
        target=ReplyTarget(channel="c", thread_root="1"), inbound_message_id="9",
        edit_interval_s=0.0, stream=True)
    await progress.start()
    responded = ModelResponded(turn_id="t", model="m", stop_reason="end_turn",
                               input_tokens=1, output_tokens=1)
    await progress.on_event(TextDelta(text="the wrong answer"))
    await progress.on_event(responded)
    await _until_shown(client, "the wrong answer")
    await progress.on_event(VerifyFailed(turn_id="t", reason="no", attempt=1))
    await progress.on_event(TextDelta(text="the repaired answer"))
    await progress.on_event(responded)
    await _until_shown(client, "the repaired answer")
    await progress.close()
    assert "the wrong answer" not in client.shown[-1]
    assert progress.message_id == "m1"  # the final answer is delivered over this message


async def test_a_draft_is_skipped_while_the_overall_budget_is_spent() -> None:
    from bots.telegram.client import PerChatRateLimiter, TelegramClient

    limiter = PerChatRateLimiter(overall_max_rate=2, overall_time_period=60)

    async def call() -> bool:
        return True

    assert not limiter.busy()
    for _ in range(2):
        await limiter.process_request(call, (), {}, "editMessageText", {"chat_id": 1}, None)
    assert limiter.busy()

    class _Bot:
        rate_limiter = limiter
        posted: list[str] = []

        async def post_json(self, endpoint: str, data: dict[str, Any]) -> bool:
            self.posted.append(endpoint)
            return True

    client = TelegramClient.__new__(TelegramClient)
    client.bot = _Bot()  # type: ignore[assignment]
    await client.stream_draft(ReplyTarget(channel="42", thread_root="1"), "7",
                              Chunk(formatted="x", fallback="x"))
    assert _Bot.posted == []  # skipped: the answers other threads wait to send go first


async def test_tool_rounds_are_lines_between_text_blocks_and_a_retry_is_not_doubled() -> None:
    from geode.loop.events import ModelRetrying, ToolProposed, ToolResulted

    client = _Client()
    progress = ProgressReporter(
        client=client, outbox=_Outbox(), row=_Row(),  # type: ignore[arg-type]
        target=ReplyTarget(channel="c", thread_root="1"), inbound_message_id="9",
        edit_interval_s=0.0, stream=True)
    await progress.start()
    responded = ModelResponded(turn_id="t", model="m", stop_reason="end_turn",
                               input_tokens=1, output_tokens=1)
    await progress.on_event(TextDelta(text="Let me look."))
    await progress.on_event(responded)
    await progress.on_event(ToolProposed(id="1", name="read_file"))
    await progress.on_event(ToolResulted(id="1", name="read_file", status="ok"))
    await progress.on_event(TextDelta(text="Found it, half"))
    await progress.on_event(ModelRetrying(error="overloaded", delay_s=0.0, attempt=2,
                                          max_attempts=3))
    await progress.on_event(TextDelta(text="Found it."))
    await _until_shown(client, "Found it.")
    await progress.close()
    shown = client.shown[-1]
    assert shown.index("Let me look.") < shown.index("🔧 read_file ✓") < shown.index("Found it.")
    assert "half" not in shown  # the retried call's partial text came once, as it ended


async def test_a_crash_right_after_a_quick_answer_was_sent_never_sends_it_again(
    make_stack: Any, fake: FakeTelegramServer
) -> None:
    from tests.bots._harness import crash_at

    hit, fault = crash_at("answer_sent_before_record")
    stack: Stack = make_stack(fault=fault, options={"stream": True, "progress_after_ms": 1000})
    await stack.start()
    fake.user_says(CHAT, "@geode_bot once", from_user=42)
    await asyncio.wait_for(hit.wait(), 10)
    await stack.crash()  # sent, its id not recorded: nothing can tell it landed
    stack.fault = None
    await stack.start()
    fake.user_says(CHAT, "@geode_bot after", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: after"), within=15)
    await settled(stack)
    assert len(finals(fake, "answer to: once")) == 1  # at most once: not sent again
    assert [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)] == [
        "answer to: once", "answer to: after"]
