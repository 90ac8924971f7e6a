"""SIGTERM during a turn, under a real `geode serve` (#30's ops matrix).

The daemon runs as a subprocess (a scripted model whose one call takes 3 s); the fake Bot
API runs in this test. A message is sent, and SIGTERM arrives while its turn runs:

* ``drain``: the default ``--drain-timeout`` (30 s) lets the turn finish; the answer is
  delivered before the process exits 0;
* ``resume``: ``--drain-timeout 0`` stops the turn at once (checkpointed ``paused``); the
  process exits 0, and the next start resumes the turn and delivers its answer.

Either way the message is answered exactly once, its progress message ends as the answer
(no "⏳ Working…" left behind), and the model's chain holds the message once.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bots.testing.telegram import FakeTelegramServer
from tests.scenarios._serve_proc import serve_env, stop, telegram_section, write_home

TOKEN = "123456:SIGTERM-TEST-TOKEN"
CHAT = -100999
FINAL = "Done: the answer."


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as srv:
        yield srv


async def _serve(home: Path, env: dict[str, str], *args: str) -> asyncio.subprocess.Process:
    log = (home / "serve.log").open("ab")
    try:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "geode", "serve", *args, env=env, cwd=str(home),
            stdout=log, stderr=log)
    finally:
        log.close()


def _bot_in_thread(fake: FakeTelegramServer, mid: int) -> list[str]:
    return [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)
            if m.reply_to_message_id == mid]


@pytest.mark.parametrize("how", ["drain", "resume"])
async def test_sigterm_during_a_turn_never_loses_the_message(
    how: str, fake: FakeTelegramServer, tmp_path: Path
) -> None:
    home = write_home(tmp_path, f"""{telegram_section(fake)}
[[bindings]]
platform = "telegram"
channel = "{CHAT}"
allow_users = ["42"]
""")
    work = tmp_path / "work"
    work.mkdir()
    env = serve_env(home, work, final=FINAL, drop_prefix="TELEGRAM_", TELEGRAM_BOT_TOKEN=TOKEN)
    (work / "script.json").write_text(json.dumps({"latency": 3.0, "script": [FINAL]}))
    args = ("--drain-timeout", "0") if how == "resume" else ()
    proc = await _serve(home, env, *args)
    try:
        await fake.wait_until(lambda: fake.calls_to("getUpdates"), within=30)
        update = fake.user_says(CHAT, "@geode_bot work on this", from_user=42)
        mid = fake.message_id_for(update)
        # the turn runs: its progress message is in the chat, the model call under way
        await fake.wait_until(lambda: any("Working" in t for t in _bot_in_thread(fake, mid)),
                              within=30)
        # The progress message goes out as the turn is accepted, before it has its lanes;
        # a turn not yet running when SIGTERM comes is left for the next start (the
        # ``resume`` case covers that). 1 s in, it is inside its 3 s model call.
        await asyncio.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
        assert proc.returncode == 0
        if how == "drain":
            assert _bot_in_thread(fake, mid) == [FINAL]  # answered before the exit
        else:
            assert FINAL not in _bot_in_thread(fake, mid)  # stopped mid-turn
            proc = await _serve(home, env)
            await fake.wait_until(lambda: FINAL in _bot_in_thread(fake, mid), within=40)
        await asyncio.sleep(0.5)  # a wrong second answer would show up now
    finally:
        await stop(proc)
    shown = _bot_in_thread(fake, mid)
    assert shown == [FINAL], shown  # once, and no progress message left behind
    finals = [s for s in fake.sent if s.plain_text == FINAL and s.reply_to_message_id == mid]
    assert len(finals) == 1, fake.sent

    from geode.store import open_store

    async with await open_store(f"sqlite:///{home / 'geode.db'}") as store:
        restored = await store.checkpointer(f"telegram:123456:{CHAT}:{mid}").load()
        assert restored is not None
        said = [m.text for m in restored.messages if m.role == "user" and m.text]
        assert sum(t.endswith(": work on this") for t in said) == 1, said
