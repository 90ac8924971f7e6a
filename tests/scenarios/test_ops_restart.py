"""kill -9 of a real `geode serve` during turns, then a restart on the same home: the restart
takes over its dead predecessor's leases at once (not after ``lease_ttl_s``), the chat says
the turns resumed, and each message ends with exactly one bot message (its placeholder,
edited into the answer): nothing frozen, nothing doubled.

The daemon is a subprocess on a Telegram binding (wire-level fake Bot API) with the scripted
model: 30 s a call in the killed run (the turns are in their model call when it dies), a
moment in the restarted one.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bots.testing.telegram import FakeTelegramServer
from tests.scenarios._serve_proc import (
    kill_9,
    serve_env,
    start_serve,
    stop,
    store_url_for,
    write_home,
)

TOKEN = "123456:RESTART-TEST-TOKEN"
CHAT = -100555
FINAL = "Done: the answer."
#: the leases' TTL. They are renewed every third of it, so the dead process's leases run at
#: least two thirds of it past the kill: an answer before then was not waiting for them.
TTL_S = 60
#: from the restart (the new process spawned) to the answers, interpreter start included:
#: room for a busy machine
BOUND_S = 30
#: from the restarted process's first Bot API call (it is up: config read, store open) to
#: the resumed turns' answers
UP_TO_ANSWER_S = 5


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url_for(request, tmp_path, request.param)


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as srv:
        yield srv


def _home(tmp_path: Path, fake: FakeTelegramServer, store_url: str
          ) -> tuple[Path, dict[str, str], Path]:
    """The daemon's home, its environment, and its scripted model's file."""
    home = write_home(tmp_path, f"""
[store]
url = "{store_url}"

[channels.telegram]
base_url = "{fake.base_url}"
base_file_url = "{fake.base_file_url}"
poll_timeout_s = 1
lease_ttl_s = {TTL_S}
progress_edit_interval_s = 0
stream = false
progress_after_ms = 0
pump_interval_s = 0.2
rate_group_per_min = 0

[[bindings]]
platform = "telegram"
channel = "{CHAT}"
allow_users = ["42"]
""", exist_ok=True)
    work = tmp_path / "work"
    work.mkdir()
    env = serve_env(home, work, final=FINAL, drop_prefix="TELEGRAM_", TELEGRAM_BOT_TOKEN=TOKEN)
    return home, env, work / "script.json"


def _model(script: Path, *, latency: float) -> None:
    script.write_text(json.dumps({"latency": latency, "script": [FINAL]}))


def _bot_messages_under(fake: FakeTelegramServer, mid: int) -> list[str]:
    """What the chat shows now of the bot's messages replying to ``mid``."""
    return [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)
            if m.reply_to_message_id == mid]


def _answered(fake: FakeTelegramServer, mid: int) -> bool:
    return FINAL in _bot_messages_under(fake, mid)


async def _until(fake: FakeTelegramServer, predicate: Callable[[], bool], *, within: float,
                 what: str) -> None:
    """Wait for ``predicate``; on timeout fail with what the chat shows."""
    try:
        await fake.wait_until(predicate, within=within)
    except TimeoutError:
        sent = [(s.method, s.message_id, s.reply_to_message_id, s.plain_text)
                for s in fake.sent]
        pytest.fail(f"{what} not within {within}s; the bot's messages: {sent}")


def _texts_of(fake: FakeTelegramServer, message_id: int) -> list[str]:
    """Every text the bot gave its message ``message_id`` (sent, then each edit)."""
    return [s.plain_text for s in fake.sent if s.message_id == message_id]


async def test_kill_9_mid_turn_then_restart_takes_over_at_once_and_resumes_in_place(
    store_url: str, fake: FakeTelegramServer, tmp_path: Path
) -> None:
    home, env, script = _home(tmp_path, fake, store_url)
    _model(script, latency=30)  # the killed run's model calls never answer
    proc = await start_serve(home, env)
    try:
        await fake.wait_until(lambda: fake.calls_to("getUpdates"), within=30)
        m1 = fake.message_id_for(fake.user_says(CHAT, "@geode_bot first", from_user=42))
        m2 = fake.message_id_for(fake.user_says(CHAT, "@geode_bot second", from_user=42))
        # Both turns run: their placeholders are out, and "typing" started (a second into
        # each turn: its placeholder's id is recorded by then, the model call under way).
        await _until(fake, lambda: len(fake.calls_to("sendChatAction")) >= 2, within=30,
                     what="both turns running")
        placeholders = {m: _bot_messages_under(fake, m) for m in (m1, m2)}
        assert all(len(p) == 1 and p[0].startswith("⏳") for p in placeholders.values()), \
            placeholders
        await kill_9(proc)
        killed_at = time.monotonic()

        _model(script, latency=0.1)
        calls_before = len(fake.calls)
        proc = await start_serve(home, env)
        restarted_at = time.monotonic()
        await _until(fake, lambda: len(fake.calls) > calls_before, within=BOUND_S,
                     what="the restarted process's first Bot API call")
        up_at = time.monotonic()
        await _until(fake, lambda: _answered(fake, m1) and _answered(fake, m2),
                     within=BOUND_S, what="the resumed turns' answers")
        answered_at = time.monotonic()
        # the answers land within 5 s of the restart being up, not after the dead leases
        assert answered_at - up_at < UP_TO_ANSWER_S, answered_at - up_at
        # before the dead process's leases could have expired: nothing waited for them
        assert answered_at < killed_at + TTL_S * 2 / 3
        assert answered_at - restarted_at < BOUND_S
        # a message after the restart is answered as usual (the intake is this process's)
        m3 = fake.message_id_for(fake.user_says(CHAT, "@geode_bot third", from_user=42))
        await _until(fake, lambda: _answered(fake, m3), within=BOUND_S,
                     what="the answer to a message after the restart")
    finally:
        await stop(proc)

    for m in (m1, m2, m3):
        # exactly one bot message under each message: its placeholder, now the answer
        assert _bot_messages_under(fake, m) == [FINAL], (m, fake.sent)
    for m in (m1, m2):
        placeholder = next(msg.message_id for msg in fake.messages_in(CHAT, from_bot=True)
                           if msg.reply_to_message_id == m)
        texts = _texts_of(fake, placeholder)
        # the chat said the turn resumed after the restart, in the same message
        assert any("↻ resumed" in t.lower() for t in texts), texts
        assert texts[-1] == FINAL and texts.count(FINAL) == 1, texts
    assert not [c for c in fake.calls_to("getUpdates") if c.status == 409]

    # nothing run twice: each message is in its session's chain once, its turn resumed in
    # place (one answer in the chain)
    from geode.store import open_store

    async with await open_store(store_url) as store:
        for m, text in ((m1, "first"), (m2, "second"), (m3, "third")):
            restored = await store.checkpointer(f"telegram:123456:{CHAT}:{m}").load()
            assert restored is not None
            said = [x.text for x in restored.messages if x.role == "user" and x.text]
            assert sum(t.endswith(f": {text}") for t in said) == 1, said
            answers = [x.text for x in restored.messages if x.role == "assistant"]
            assert answers == [FINAL], answers
