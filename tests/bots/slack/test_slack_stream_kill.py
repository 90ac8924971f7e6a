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


#: ~5,000 characters of prose and a code block: several 1,000-character Slack pages
_PROSE = " ".join(f"**word{i}** plain{i}" for i in range(30))
_CODE = "\n".join(f"line_{i} = {i} * 2  # a comment" for i in range(30))
LONG = "\n\n".join([_PROSE] * 3 + [f"```python\n{_CODE}\n```"] + [_PROSE] * 2 + ["The end."])


async def test_kill_9_after_the_stream_spilled_into_a_second_stream_fills_every_page_once(
        fake: FakeSlack, tmp_path: Path) -> None:
    """The streamed draft outgrew one message: the first stream was stopped and the draft
    went on in a second one, recorded on the turn's outbox row, when the process died. The
    recovered turn edits those pages (it cannot append to the dead process's streams): each
    message ends with its final part, once, and no stream is left open."""
    from bots.slack import chunk_mrkdwn

    home = write_home(tmp_path, f"""
[channels.slack]
base_url = "{fake.base_url}"
lease_ttl_s = 1.5
progress_edit_interval_s = 0.1
stream = true
progress_after_ms = 0
pump_interval_s = 0.2
status_api = false
chunk_limit = 1000
stream_appends_per_min = 0

[[bindings]]
platform = "slack"
channel = "{CHANNEL}"
allow_users = ["U1"]
""")
    work = tmp_path / "work"
    work.mkdir()
    env = serve_env(home, work, final=LONG, drop_prefix="SLACK_",
                    SLACK_BOT_TOKEN=fake.bot_token, SLACK_APP_TOKEN=fake.app_token)
    # ~6 s of streaming: the second stream exists well before the answer is complete
    (work / "script.json").write_text(json.dumps(
        {"latency": 0.2, "script": [LONG], "stream_piece": 80, "stream_every_s": 0.1}))
    expected = [c.formatted for c in chunk_mrkdwn(LONG, limit=1000)]
    assert len(expected) >= 4

    def bot_messages(ts: str) -> list[dict[str, object]]:
        return [m for m in fake.messages_in(CHANNEL, thread_ts=ts)
                if m["ts"] != ts and m.get("bot_id") == fake.bot_id]

    def second_page_grew() -> bool:
        # a page is appended to only after its id is on the row (a kill between its start
        # and that record is the one window that leaves it)
        started = [p.ts for p in fake.posts if p.method == "chat.startStream"]
        return len(started) >= 2 and any(
            p.method == "chat.appendStream" and p.ts == started[1] for p in fake.posts)

    proc = await start_serve(home, env)
    try:
        await fake.wait_until(lambda: fake.connected, within=30)
        ts = await fake.user_posts(CHANNEL, f"<@{fake.bot_user_id}> write a lot", user="U1")
        await fake.wait_until(second_page_grew, within=30)
        await kill_9(proc)
        streamed = [p.ts for p in fake.posts if p.method == "chat.startStream"]
        posted = len(fake.posts)
        assert [m["text"] for m in bot_messages(ts)] != expected  # mid-answer
        assert bot_messages(ts)[-1].get("streaming")  # the second stream left open
        proc = await start_serve(home, env)
        await fake.wait_until(
            lambda: [m["text"] for m in bot_messages(ts)] == expected, within=60)
    finally:
        await stop(proc)

    shown = bot_messages(ts)
    log = (home / "serve.log").read_text()[-3000:]
    assert [m["text"] for m in shown] == expected, (shown, log)  # every page its final part
    assert not any(m.get("streaming") for m in shown)  # no stream left open
    # the crashed run's streams are the answer's first messages, reused: after the restart
    # only the pages they lacked were posted, no stream started, nothing deleted
    assert [m["ts"] for m in shown][:len(streamed)] == streamed
    after = fake.posts[posted:]
    assert len([p for p in after if p.method == "chat.postMessage"]) <= (
        len(expected) - len(streamed))
    assert not [p for p in after if p.method in ("chat.startStream", "chat.delete")]
