"""kill -9 of a real `geode serve` hosting the Slack connector (Socket Mode), then restart.

Same contract as the Telegram scenario: every mention gets exactly one final reply in its
thread and appears once in its session, whatever point the daemon died at.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bots.testing.slack import FakeSlack
from tests.scenarios._serve_proc import kill_9, serve_env, start_serve, stop, write_home

CHANNEL = "C0KILL"
FINAL = "Done: the answer."


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as srv:
        srv.add_channel(CHANNEL, name="kill-test")
        yield srv


def _home(tmp_path: Path, fake: FakeSlack) -> tuple[Path, dict[str, str]]:
    home = write_home(tmp_path, f"""
[channels.slack]
base_url = "{fake.base_url}"
lease_ttl_s = 1.5
progress_edit_interval_s = 0
stream = false
progress_after_ms = 0
pump_interval_s = 0.2
status_api = false

[[bindings]]
platform = "slack"
channel = "{CHANNEL}"
allow_users = ["U1"]
""")
    env = serve_env(
        home,
        tmp_path,
        final=FINAL,
        drop_prefix="SLACK_",
        SLACK_BOT_TOKEN=fake.bot_token,
        SLACK_APP_TOKEN=fake.app_token,
    )
    return home, env


def _bot_texts(fake: FakeSlack, ts: str) -> list[str]:
    return [
        str(m.get("text", "")) for m in fake.messages_in(CHANNEL, thread_ts=ts) if m["ts"] != ts
    ]


def _finals(fake: FakeSlack, ts: str) -> int:
    return _bot_texts(fake, ts).count(FINAL)


@pytest.mark.parametrize("point", ["recorded", "turn_running", "final_visible"])
async def test_kill_9_then_restart_gives_exactly_one_final_reply(
    point: str, fake: FakeSlack, tmp_path: Path
) -> None:
    home, env = _home(tmp_path, fake)
    proc = await start_serve(home, env)
    mention = f"<@{fake.bot_user_id}>"
    try:
        await fake.wait_until(lambda: fake.connected, within=30)
        ts1 = await fake.user_posts(CHANNEL, f"{mention} first", user="U1")
        ts2 = await fake.user_posts(CHANNEL, f"{mention} second", user="U1")
        if point == "recorded":  # acked only after the durable record
            await fake.wait_until(lambda: fake.envelopes and not fake.unacked, within=30)
        elif point == "turn_running":
            await fake.wait_until(
                lambda: all(any("Working" in t for t in _bot_texts(fake, ts)) for ts in (ts1, ts2)),
                within=30,
            )
        else:
            await fake.wait_until(lambda: _finals(fake, ts1), within=30)
        await kill_9(proc)

        proc = await start_serve(home, env)
        await fake.wait_until(lambda: fake.connected, within=30)
        ts3 = await fake.user_posts(CHANNEL, f"{mention} third", user="U1")
        await fake.wait_until(lambda: all(_finals(fake, ts) for ts in (ts1, ts2, ts3)), within=40)
        await asyncio.sleep(0.5)  # let a wrong duplicate show up before counting
    finally:
        await stop(proc)

    for ts in (ts1, ts2, ts3):
        texts = _bot_texts(fake, ts)
        # One bot message per thread: its placeholder, now the answer. A placeholder sent
        # just before the kill (its ts not yet recorded) is found in the thread and reused,
        # never left frozen beside a second one.
        assert texts == [FINAL], (ts, texts, (home / "serve.log").read_text()[-3000:])

    from geode.store import open_store

    team = fake.team_id
    async with await open_store(f"sqlite:///{home / 'geode.db'}") as store:
        for ts, text in ((ts1, "first"), (ts2, "second"), (ts3, "third")):
            restored = await store.checkpointer(f"slack:{team}:{CHANNEL}:{ts}").load()
            assert restored is not None
            said = [m.text for m in restored.messages if m.role == "user" and m.text]
            assert sum(text in t for t in said) == 1, said
