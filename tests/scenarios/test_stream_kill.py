"""kill -9 of a real `geode serve` while an answer streams into its Telegram thread, then
restart: the recovered turn streams again into the same progress message and the answer is
there once, with no draft left beside it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bots.testing.telegram import FakeTelegramServer
from tests.scenarios._serve_proc import (
    kill_9,
    serve_env,
    start_serve,
    stop,
    telegram_section,
    write_home,
)

TOKEN = "123456:STREAM-KILL-TOKEN"
CHAT = -100123
FINAL = " ".join(f"word{i}" for i in range(40))


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as srv:
        yield srv


async def test_kill_9_mid_stream_then_restart_leaves_one_answer_and_no_draft(
    fake: FakeTelegramServer, tmp_path: Path
) -> None:
    section = telegram_section(fake).replace("stream = false", "stream = true")
    home = write_home(tmp_path, f"""{section}
[[bindings]]
platform = "telegram"
channel = "{CHAT}"
allow_users = ["42"]
""")
    work = tmp_path / "work"
    work.mkdir()
    env = serve_env(home, work, final=FINAL, drop_prefix="TELEGRAM_", TELEGRAM_BOT_TOKEN=TOKEN)
    # the answer streams in pieces over ~4 s: the kill falls inside it
    (work / "script.json").write_text(json.dumps(
        {"latency": 0.2, "script": [FINAL], "stream_piece": 20, "stream_every_s": 0.25}))

    def drafts(mid: int) -> list[str]:
        return [s.plain_text for s in fake.sent if s.reply_to_message_id == mid
                and s.plain_text.startswith("⏳ Working") and "word1" in s.plain_text]

    proc = await start_serve(home, env)
    try:
        await fake.wait_until(lambda: fake.calls_to("getUpdates"), within=30)
        mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot stream it", from_user=42))
        await fake.wait_until(lambda: drafts(mid), within=30)
        assert not [s for s in fake.sent if s.plain_text == FINAL]  # still streaming
        await kill_9(proc)
        proc = await start_serve(home, env)
        await fake.wait_until(
            lambda: [s for s in fake.sent if s.plain_text == FINAL], within=40)
    finally:
        await stop(proc)

    visible = [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)
               if m.reply_to_message_id == mid]
    assert visible == [FINAL], visible  # the draft became the answer: nothing beside it
    assert len([s for s in fake.sent if s.plain_text == FINAL]) == 1


#: ~9,500 characters: three Telegram messages, a code block across the first boundary
_PROSE = " ".join(f"**word{i}** plain{i}" for i in range(40))
_CODE = "\n".join(f"line_{i} = {i} * 2  # a comment to make it long" for i in range(60))
LONG = "\n\n".join([_PROSE] * 5 + [f"```python\n{_CODE}\n```"] + [_PROSE] * 4 + ["The end."])


async def test_kill_9_after_the_draft_spilled_into_new_messages_fills_every_page_once(
    fake: FakeTelegramServer, tmp_path: Path
) -> None:
    """The draft outgrew one message (its pages recorded on the turn's outbox row) when the
    process died: the recovered turn streams again over the same messages, and the answer is
    those messages, once; no page is left as a draft, nothing is sent twice."""
    from bots.telegram.format import chunk_markdown
    from bots.testing._telegram_html import parse_telegram_html

    section = telegram_section(fake).replace("stream = false", "stream = true")
    home = write_home(tmp_path, f"""{section}
[[bindings]]
platform = "telegram"
channel = "{CHAT}"
allow_users = ["42"]
""")
    work = tmp_path / "work"
    work.mkdir()
    env = serve_env(home, work, final=LONG, drop_prefix="TELEGRAM_", TELEGRAM_BOT_TOKEN=TOKEN)
    # ~6 s of streaming: the second page exists well before the answer is complete
    (work / "script.json").write_text(json.dumps(
        {"latency": 0.2, "script": [LONG], "stream_piece": 160, "stream_every_s": 0.1}))
    expected = [parse_telegram_html(c.formatted)[0] for c in chunk_markdown(LONG)]
    assert len(expected) == 3

    def sends() -> list[object]:
        return [c for c in fake.calls if c.method == "sendMessage" and c.status == 200]

    proc = await start_serve(home, env)
    try:
        await fake.wait_until(lambda: fake.calls_to("getUpdates"), within=30)
        fake.user_says(CHAT, "@geode_bot write a lot", from_user=42)
        # a page was added and recorded (it is edited on only after its id is on the row;
        # a kill between a page's send and its record is the one window that leaves it)
        def page_edited() -> bool:
            bot = fake.messages_in(CHAT, from_bot=True)
            return len(bot) >= 2 and any(
                c.method == "editMessageText" and c.params.get("message_id")
                == bot[1].message_id for c in fake.calls)

        await fake.wait_until(page_edited, within=30)
        await kill_9(proc)
        before = len(sends())
        assert [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)] != expected
        proc = await start_serve(home, env)
        await fake.wait_until(
            lambda: [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)] == expected,
            within=60)
    finally:
        await stop(proc)

    visible = fake.messages_in(CHAT, from_bot=True)
    assert [m.plain_text for m in visible] == expected  # every page holds its final part
    assert not any(m.plain_text.startswith(("⏳", "…")) for m in visible)
    # the recovered turn reused the crashed run's pages: only the one page it still lacked
    # (at most) was sent after the restart
    assert len(sends()) - before <= len(expected) - 2
