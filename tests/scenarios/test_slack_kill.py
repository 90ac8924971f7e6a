"""kill -9 of a real `geode serve` hosting the Slack connector (Socket Mode), then restart.

Same contract as the Telegram scenario: every mention gets exactly one final reply in its
thread and appears once in its session, whatever point the daemon died at.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from geode.testing.fake_slack import FakeSlack

REPO = Path(__file__).resolve().parents[2]
CHANNEL = "C0KILL"
FINAL = "Done: the answer."


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as srv:
        srv.add_channel(CHANNEL, name="kill-test")
        yield srv


def _home(tmp_path: Path, fake: FakeSlack) -> tuple[Path, dict[str, str]]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(f"""
[channels.slack]
base_url = "{fake.base_url}"
lease_ttl_s = 1.5
progress_edit_interval_s = 0
pump_interval_s = 0.2
status_api = false

[[bindings]]
platform = "slack"
channel = "{CHANNEL}"
allow_users = ["U1"]
""")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"latency": 1.0, "script": [FINAL]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEODE_", "SLACK_"))}
    env.update(
        GEODE_HOME=str(home),
        GEODE_SCRIPTED_MODEL=str(script),
        GEODE_HEALTH_PORT=str(_free_port()),
        SLACK_BOT_TOKEN=fake.bot_token,
        SLACK_APP_TOKEN=fake.app_token,
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
    )
    return home, env


async def _serve(home: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    log = (home / "serve.log").open("ab")
    try:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "geode", "serve", env=env, cwd=str(home), stdout=log, stderr=log
        )
    finally:
        log.close()


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
    proc = await _serve(home, env)
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
        proc.kill()
        await proc.wait()
        assert proc.returncode == -signal.SIGKILL

        proc = await _serve(home, env)
        await fake.wait_until(lambda: fake.connected, within=30)
        ts3 = await fake.user_posts(CHANNEL, f"{mention} third", user="U1")
        await fake.wait_until(lambda: all(_finals(fake, ts) for ts in (ts1, ts2, ts3)), within=40)
        await asyncio.sleep(0.5)  # let a wrong duplicate show up before counting
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()

    for ts in (ts1, ts2, ts3):
        texts = _bot_texts(fake, ts)
        assert texts.count(FINAL) == 1, (ts, texts, (home / "serve.log").read_text()[-3000:])

    from geode.store import open_store

    team = fake.team_id
    async with await open_store(f"sqlite:///{home / 'geode.db'}") as store:
        for ts, text in ((ts1, "first"), (ts2, "second"), (ts3, "third")):
            restored = await store.checkpointer(f"slack:{team}:{CHANNEL}:{ts}").load()
            assert restored is not None
            said = [m.text for m in restored.messages if m.role == "user" and m.text]
            assert sum(text in t for t in said) == 1, said
