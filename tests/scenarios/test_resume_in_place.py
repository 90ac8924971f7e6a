"""kill -9 of a real `geode serve` in the middle of a channel turn: after the restart the turn
resumes in place (same turn, its rounds, time and spend counted on), and a turn that kills
the process every time ends after the recovery limit while the thread stays usable.

The daemon is a subprocess on a Telegram binding (wire-level fake Bot API) with an
Anthropic model pointed at the wire-level fake Messages API run by this test, so the
model's script and the requests it received outlive the killed process.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bots.testing.telegram import FakeTelegramServer
from geode.testing.fake_anthropic import FakeAnthropicServer
from tests.scenarios._serve_proc import (
    REPO,
    free_port,
    kill_9,
    start_serve,
    stop,
    store_url_for,
    telegram_section,
    write_home,
)

LAUNCHER = Path(__file__).with_name("_paused_geode.py")

TOKEN = "123456:RESUME-TEST-TOKEN"
KEY = "sk-ant-api03-resumetest0123456789abcdef"
CHAT = -100777


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url_for(request, tmp_path, request.param)


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as srv:
        yield srv


@pytest.fixture
async def model() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer() as srv:
        yield srv


def _home(tmp_path: Path, fake: FakeTelegramServer, model: FakeAnthropicServer,
          store_url: str, loop: str) -> tuple[Path, dict[str, str]]:
    home = write_home(tmp_path, f"""
[store]
url = "{store_url}"

[model]
default = "claude-opus-5-5"
max_retries = 1

[loop]
{loop}
{telegram_section(fake)}
[[bindings]]
platform = "telegram"
channel = "{CHAT}"
allow_users = ["42"]
time_budget_s = 600
""", exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GEODE_", "TELEGRAM_", "ANTHROPIC_"))}
    env.update(
        GEODE_HOME=str(home), GEODE_HEALTH_PORT=str(free_port()),
        TELEGRAM_BOT_TOKEN=TOKEN, ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=model.base_url,
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
    )
    return home, env


async def start_paused(home: Path, env: dict[str, str], point: str,
                       marker: Path) -> asyncio.subprocess.Process:
    """`geode serve` that freezes at ``point`` (writing ``marker``), for the kill."""
    log = (home / "serve.log").open("ab")
    try:
        return await asyncio.create_subprocess_exec(
            sys.executable, str(LAUNCHER), point, str(marker), "serve",
            env=env, cwd=str(home), stdout=log, stderr=log)
    finally:
        log.close()


async def _checkpoint(store_url: str, session_id: str) -> tuple[list[Any], dict[str, Any]]:
    from geode.store import open_store

    async with await open_store(store_url) as store:
        restored = await store.checkpointer(session_id).load()
        assert restored is not None
        return list(restored.messages), dict(restored.state)


async def _timeline_kinds(store_url: str, session_id: str) -> list[str]:
    from geode.store import open_store

    async with await open_store(store_url) as store:
        return [r.kind for r in await store.timeline.list(session_id)]


def _replies_to(fake: FakeTelegramServer, mid: int) -> list[str]:
    return [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)
            if m.reply_to_message_id == mid and not m.plain_text.startswith("⏳")]


def _tool_results(body: dict[str, Any]) -> list[str]:
    out = []
    for m in body["messages"]:
        if isinstance(m["content"], list):
            out += [b["tool_use_id"] for b in m["content"] if b.get("type") == "tool_result"]
    return out


async def test_kill_9_in_round_3_resumes_the_turn_and_stops_at_max_rounds_in_total(
    store_url: str, fake: FakeTelegramServer, model: FakeAnthropicServer, tmp_path: Path
) -> None:
    for _ in range(10):
        model.enqueue_tool_calls([("list_dir", {"path": "."})])
    home, env = _home(tmp_path, fake, model, store_url, "max_rounds = 5")
    marker = tmp_path / "paused"
    # round 3's tool batch is saved, its tool has not run: the process dies there
    proc = await start_paused(home, env, "batch_proposed#3", marker)
    try:
        mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot dig deep", from_user=42))
        await fake.wait_until(marker.exists, within=40)
        await kill_9(proc)
        session_id = f"telegram:123456:{CHAT}:{mid}"
        before, saved = await _checkpoint(store_url, session_id)
        assert len(model.generate_requests) == 3
        assert saved["round"] == 2 and saved["elapsed_s"] > 0
        assert before[-1].tool_uses  # the batch is open: proposed, never finished

        proc = await start_serve(home, env)
        await fake.wait_until(lambda: _replies_to(fake, mid), within=40)
    finally:
        await stop(proc)

    requests = model.generate_requests
    assert len(requests) == 5, [len(r.body["messages"]) for r in requests]  # 5 in total, not 8
    resumed = requests[3].body
    # the model sees the turn's earlier rounds: three tool_use/tool_result pairs, one prompt
    assert len(_tool_results(resumed)) == 3
    assert json.dumps(resumed["messages"]).count("dig deep") == 1
    assert "restarted" not in json.dumps(resumed["messages"])  # no extra note is added
    reply = _replies_to(fake, mid)
    assert len(reply) == 1 and "max rounds" in reply[0], reply
    _, final = await _checkpoint(store_url, session_id)
    assert final["last_termination"] == "max_rounds" and final["round"] == 5
    assert final["recoveries"] == 1
    assert final["turn_id"] == saved["turn_id"]  # the same turn, not a new one
    assert final["elapsed_s"] >= saved["elapsed_s"]  # the time budget kept counting
    assert final["usage"]["input_tokens"] == 5 * 12  # so did the spend


async def test_a_turn_that_kills_the_process_every_time_ends_after_the_recovery_limit(
    store_url: str, fake: FakeTelegramServer, model: FakeAnthropicServer, tmp_path: Path
) -> None:
    model.enqueue_tool_calls([("list_dir", {"path": "."})])
    model.enqueue_tool_calls([("list_dir", {"path": "."})])
    model.enqueue_text("the later answer")
    home, env = _home(tmp_path, fake, model, store_url, "recovery_limit = 1")
    marker = tmp_path / "paused"
    # every run dies after its first batch
    proc = await start_paused(home, env, "batch_done", marker)
    try:
        mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot poison", from_user=42))
        for _ in range(2):  # the first run, then the one resume the limit allows
            await fake.wait_until(marker.exists, within=40)
            await kill_9(proc)
            marker.unlink()
            proc = await start_paused(home, env, "batch_done", marker)
        await fake.wait_until(lambda: _replies_to(fake, mid), within=40)
        reply = _replies_to(fake, mid)
        assert len(reply) == 1 and "recovery limit" in reply[0], reply
        assert "interrupted 2 times" in reply[0]
        assert len(model.generate_requests) == 2  # the ended turn asked the model nothing
        # the resumed run saw the turn as it was: no "restarted" note added per recovery
        assert "restarted" not in json.dumps(model.generate_requests[1].body["messages"])

        bot_msg = next(m.message_id for m in fake.messages_in(CHAT, from_bot=True)
                       if m.reply_to_message_id == mid and m.plain_text == reply[0])
        later = fake.message_id_for(
            fake.user_says(CHAT, "and now?", from_user=42, reply_to=bot_msg))
        await fake.wait_until(lambda: _replies_to(fake, later), within=40)
    finally:
        await stop(proc)
    assert _replies_to(fake, later) == ["the later answer"]
    assert not marker.exists()
    session_id = f"telegram:123456:{CHAT}:{mid}"
    assert "turn.recovery_limit" in await _timeline_kinds(store_url, session_id)
