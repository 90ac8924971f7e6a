"""A real `geode serve` answering Telegram messages with an OpenAI-compatible model keeps one
connection to the model endpoint for all its turns, and closes its client at shutdown.

The daemon runs as a subprocess with an operator's config.toml; the Bot API fake and the
model fake run in this test's process. Each mention starts a new thread, so each turn opens
a new session: before the shared client cache every session built its own ``AsyncOpenAI``
(a new connection per turn, never closed).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bots.testing.telegram import FakeTelegramServer
from geode.testing.fake_openai import FakeOpenAIServer
from tests.scenarios._serve_proc import REPO, free_port, start_serve, stop

TOKEN = "123456:CLIENT-TEST-TOKEN"
CHAT = -100777
TURNS = 4

pytestmark = pytest.mark.slow


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

[channels.telegram]
base_url = "{tg.base_url}"
base_file_url = "{tg.base_file_url}"
poll_timeout_s = 1
progress_edit_interval_s = 0
stream = false
progress_after_ms = 0
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
        OPENAI_BASE_URL=model.base_url,
        # an unclosed socket or transport would be reported in the daemon's log
        PYTHONWARNINGS="always::ResourceWarning",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
    )
    return home, env


async def test_turns_share_one_model_connection_and_the_client_is_closed(
    fakes: tuple[FakeTelegramServer, FakeOpenAIServer], tmp_path: Path
) -> None:
    tg, model = fakes
    home, env = _home(tmp_path, tg, model)
    proc = await start_serve(home, env)
    try:
        await tg.wait_until(lambda: tg.calls_to("getUpdates"), within=30)
        for i in range(TURNS):
            answer = f"answer number {i}"
            model.enqueue_text(answer)
            update = tg.user_says(CHAT, f"@geode_bot question {i}", from_user=42)
            mid = tg.message_id_for(update)
            await tg.wait_until(
                lambda mid=mid, answer=answer: any(  # type: ignore[misc]
                    m.plain_text == answer and m.reply_to_message_id == mid
                    for m in tg.messages_in(CHAT, from_bot=True)
                ),
                within=30,
            )
    finally:
        await stop(proc)
    assert proc.returncode == 0
    assert len(model.generate_requests) == TURNS
    assert len(model.connections) == 1, model.connections
    log = (home / "serve.log").read_text(errors="replace")
    assert "ResourceWarning" not in log and "nclosed" not in log, log[-3000:]
