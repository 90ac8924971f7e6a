"""The model endpoint timing out and answering 5xx storms, under a real `geode serve` (#30).

The daemon runs as a subprocess with an operator's config.toml (an OpenAI-compatible model
with a 3 s request timeout and 3 attempts a call); the Bot API fake and the model fake run
in this test's process. One message at a time, so the model's script is consumed in order:

1. a short storm (500, 503) then an answer: retried within the bound, answered once;
2. a storm longer than the bound (three 5xx in a row): the turn ends *visibly* in the
   thread (one message saying the model failed), and nothing is retried past the bound;
3. a request that times out (the answer comes after 8 s, the client gives up after 3 s),
   then an answer: retried, answered once;
4. a plain message afterwards: answered, the service alive and ready.

Each message gets exactly one final message in its thread, nothing twice.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from bots.testing.telegram import FakeTelegramServer
from geode.testing.fake_openai import FakeOpenAIServer
from tests.scenarios._serve_proc import REPO, free_port, start_serve, stop

TOKEN = "123456:MODEL-ERRORS-TOKEN"
CHAT = -100888


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeTelegramServer, FakeOpenAIServer]]:
    async with (
        FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as tg,
        FakeOpenAIServer() as model,
    ):
        yield tg, model


def _home(
    tmp_path: Path, tg: FakeTelegramServer, model: FakeOpenAIServer
) -> tuple[Path, dict[str, str]]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(f"""
[model]
default = "openai:fake-model"
request_timeout_s = 3.0
max_retries = 3
call_deadline_s = 20

[channels.telegram]
base_url = "{tg.base_url}"
base_file_url = "{tg.base_file_url}"
poll_timeout_s = 1
progress_edit_interval_s = 0
stream = false
progress_after_ms = 0
pump_interval_s = 0.2
rate_group_per_min = 0

[[bindings]]
platform = "telegram"
channel = "{CHAT}"
allow_users = ["42"]
""")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GEODE_", "TELEGRAM_", "OPENAI_"))}
    env.update(
        GEODE_HOME=str(home),
        GEODE_HEALTH_PORT=str(free_port()),
        TELEGRAM_BOT_TOKEN=TOKEN,
        OPENAI_API_KEY="sk-fake",
        OPENAI_BASE_URL=model.base_url,
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
    )
    return home, env


def _in_thread(tg: FakeTelegramServer, mid: int) -> list[str]:
    """What the chat shows under message ``mid`` (the bot's messages, as edited last)."""
    return [m.plain_text for m in tg.messages_in(CHAT, from_bot=True)
            if m.reply_to_message_id == mid]


def _final(texts: list[str]) -> bool:
    return bool(texts) and not any(t.startswith(("⏳", "⌛")) for t in texts)


async def _ask(tg: FakeTelegramServer, text: str, *, within: float = 40) -> tuple[int, list[str]]:
    update = tg.user_says(CHAT, f"@geode_bot {text}", from_user=42)
    mid = tg.message_id_for(update)
    await tg.wait_until(lambda: _final(_in_thread(tg, mid)), within=within)
    await asyncio.sleep(0.5)  # a second (wrong) message would show up now
    return mid, _in_thread(tg, mid)


async def test_model_errors_and_timeouts_end_visibly_or_retry_within_bounds(
    fakes: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    tg, model = fakes
    home, env = _home(tmp_path, tg, model)
    proc = await start_serve(home, env)
    try:
        await tg.wait_until(lambda: tg.calls_to("getUpdates"), within=30)

        model.enqueue_error(500)
        model.enqueue_error(503)
        model.enqueue_text("answer one")
        _m1, shown1 = await _ask(tg, "first")
        assert shown1 == ["answer one"], shown1
        assert len(model.generate_requests) == 3, model.generate_requests

        for _ in range(3):
            model.enqueue_error(502)
        model.enqueue_text("must never be used")
        _m2, shown2 = await _ask(tg, "second")
        assert len(shown2) == 1, shown2  # one message says the turn failed, nothing else
        assert shown2[0].startswith("⚠️ I could not finish (model error"), shown2
        assert len(model.generate_requests) == 6  # three attempts: the bound, not more

        model.clear_script()  # "must never be used" stays unused: no 4th attempt came
        model.enqueue_text("too late", delay=8.0)
        model.enqueue_text("answer three")
        _m3, shown3 = await _ask(tg, "third")
        assert shown3 == ["answer three"], shown3  # the timed-out call was retried once
        assert len(model.generate_requests) == 8

        model.clear_script()
        model.enqueue_text("answer four")
        _m4, shown4 = await _ask(tg, "fourth")
        assert shown4 == ["answer four"], shown4

        async with aiohttp.ClientSession() as s, s.get(
                f"http://127.0.0.1:{env['GEODE_HEALTH_PORT']}/readyz") as r:
            assert r.status == 200, await r.text()
        assert proc.returncode is None
    finally:
        await stop(proc)
    assert proc.returncode == 0
    log = (home / "serve.log").read_text(errors="replace")
    assert "supervisor.task_died" not in log
