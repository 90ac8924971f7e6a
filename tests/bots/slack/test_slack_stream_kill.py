"""kill -9 of a real `geode serve` while an answer streams into its Slack thread through
chat.startStream / appendStream, then restart: the recovered turn finds the recorded stream
as its progress message, and the thread ends with the answer once, no stream left open and
no placeholder beside it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bots.testing.slack import FakeSlack
from tests.scenarios._serve_proc import kill_9, serve_env, start_serve, stop, write_home

CHANNEL = "C0STREAMKILL"
FINAL = " ".join(f"word{i}" for i in range(40))


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as srv:
        srv.add_channel(CHANNEL, name="stream-kill")
        yield srv


async def test_kill_9_mid_stream_then_restart_leaves_one_answer_and_no_open_stream(
        fake: FakeSlack, tmp_path: Path) -> None:
    home = write_home(tmp_path, f"""
[channels.slack]
base_url = "{fake.base_url}"
lease_ttl_s = 1.5
progress_edit_interval_s = 0.1
stream = true
progress_after_ms = 0
pump_interval_s = 0.2
status_api = false

[[bindings]]
platform = "slack"
channel = "{CHANNEL}"
allow_users = ["U1"]
""")
    work = tmp_path / "work"
    work.mkdir()
    env = serve_env(home, work, final=FINAL, drop_prefix="SLACK_",
                    SLACK_BOT_TOKEN=fake.bot_token, SLACK_APP_TOKEN=fake.app_token)
    # the answer streams in pieces over ~4 s: the kill falls inside it
    (work / "script.json").write_text(json.dumps(
        {"latency": 0.2, "script": [FINAL], "stream_piece": 20, "stream_every_s": 0.25}))

    def bot_messages(ts: str) -> list[dict[str, object]]:
        return [m for m in fake.messages_in(CHANNEL, thread_ts=ts)
                if m["ts"] != ts and m.get("bot_id") == fake.bot_id]

    proc = await start_serve(home, env)
    try:
        await fake.wait_until(lambda: fake.connected, within=30)
        ts = await fake.user_posts(CHANNEL, f"<@{fake.bot_user_id}> stream it", user="U1")
        await fake.wait_until(lambda: fake.calls_to("chat.appendStream"), within=30)
        assert not [m for m in bot_messages(ts) if m["text"] == FINAL]  # still streaming
        await kill_9(proc)
        streamed = [p.ts for p in fake.posts if p.method == "chat.startStream"]
        assert [m.get("streaming") for m in bot_messages(ts)] == [True]  # left open
        proc = await start_serve(home, env)
        await fake.wait_until(
            lambda: [m for m in bot_messages(ts) if m["text"] == FINAL], within=40)
    finally:
        await stop(proc)

    shown = bot_messages(ts)
    log = (home / "serve.log").read_text()[-3000:]
    assert [m["text"] for m in shown] == [FINAL], (shown, log)  # nothing beside the answer
    assert not shown[0].get("streaming")  # no stream left open
    assert len([p for p in fake.posts if p.text == FINAL and p.method == "chat.update"]) == 1
    # the stream the killed process started was the recovered turn's progress message
    assert streamed and (shown[0]["ts"] in streamed or any(
        p.method == "chat.delete" and p.ts == streamed[0] for p in fake.posts))
