"""kill -9 of a real `geode serve` hosting the Discord connector, then restart.

Same contract as the Telegram and Slack scenarios: every mention gets exactly one final
reply in its thread and appears once in its session, whatever point the daemon died at.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bots.testing.discord import FakeDiscord
from tests.scenarios._serve_proc import (
    discord_config,
    kill_9,
    serve_env,
    start_serve,
    stop,
    write_home,
)

TOKEN = "fake-bot-token-kill"
FINAL = "Done: the answer."


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord(token=TOKEN, heartbeat_interval_ms=500) as srv:
        yield srv


def _home(tmp_path: Path, fake: FakeDiscord) -> tuple[Path, dict[str, str]]:
    home = write_home(tmp_path, discord_config(fake))
    env = serve_env(home, tmp_path, final=FINAL, drop_prefix="DISCORD_", DISCORD_BOT_TOKEN=TOKEN)
    return home, env


def _bot_texts(fake: FakeDiscord, mid: int) -> list[str]:
    """What the bot shows for one mention: its thread (id = the message id) and inline replies."""
    try:
        in_thread = fake.messages_in(mid)
    except KeyError:
        in_thread = []
    inline = [
        m
        for m in fake.messages_in(fake.channel_id)
        if (m.get("message_reference") or {}).get("message_id") == str(mid)
    ]
    return [
        str(m.get("content", ""))
        for m in [*in_thread, *inline]
        if str((m.get("author") or {}).get("id")) == str(fake.bot_id)
    ]


def _finals(fake: FakeDiscord, mid: int) -> int:
    return _bot_texts(fake, mid).count(FINAL)


@pytest.mark.parametrize("point", ["recorded", "turn_running", "final_visible"])
async def test_kill_9_then_restart_gives_exactly_one_final_reply(
    point: str, fake: FakeDiscord, tmp_path: Path
) -> None:
    home, env = _home(tmp_path, fake)
    proc = await start_serve(home, env)
    try:
        await fake.wait_for(lambda: fake.active_sessions, timeout=30)
        await asyncio.sleep(0.5)  # READY handled and the connector subscribed
        m1 = await fake.user_says(fake.channel_id, "first", mention_bot=True)
        m2 = await fake.user_says(fake.channel_id, "second", mention_bot=True)
        if point == "recorded":  # the 👀 ack comes after the durable record
            await fake.wait_for(lambda: len(fake.reactions) >= 2, timeout=30)
        elif point == "turn_running":
            await fake.wait_for(
                lambda: all(any("Working" in t for t in _bot_texts(fake, m)) for m in (m1, m2)),
                timeout=30,
            )
        else:
            await fake.wait_for(lambda: _finals(fake, m1), timeout=30)
        await kill_9(proc)

        proc = await start_serve(home, env)
        await fake.wait_for(lambda: fake.active_sessions, timeout=30)
        await asyncio.sleep(0.5)
        m3 = await fake.user_says(fake.channel_id, "third", mention_bot=True)
        await fake.wait_for(lambda: all(_finals(fake, m) for m in (m1, m2, m3)), timeout=40)
        await asyncio.sleep(0.5)  # let a wrong duplicate show up before counting
    finally:
        await stop(proc)

    log = (home / "serve.log").read_text()[-3000:]
    for m in (m1, m2, m3):
        # One bot message per mention: its placeholder, now the answer. A placeholder sent
        # just before the kill (its id not yet recorded) is found again and reused, never
        # left frozen beside a second one.
        assert _bot_texts(fake, m) == [FINAL], (m, _bot_texts(fake, m), log)

    from geode.store import open_store

    async with await open_store(f"sqlite:///{home / 'geode.db'}") as store:
        for m, text in ((m1, "first"), (m2, "second"), (m3, "third")):
            sid = f"discord:{fake.bot_id}:{fake.channel_id}:{m}"
            restored = await store.checkpointer(sid).load()
            assert restored is not None, sid
            said = [x.text for x in restored.messages if x.role == "user" and x.text]
            assert sum(text in t for t in said) == 1, said
