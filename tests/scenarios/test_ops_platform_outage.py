"""The platform API unreachable, at start and mid-run, under a real `geode serve` (#30).

The daemon runs as a subprocess (its own GEODE_HOME, a scripted model); the wire-level fake
Telegram Bot API runs in this test's process, on a fixed loopback port, so the test can
take it down and bring it back. What must hold:

* **at start** (issue #30, finding 2): a start that cannot reach Telegram used to print
  ``error: cannot reach the Telegram Bot API`` and exit 2 (which the systemd unit's
  ``RestartPreventExitStatus=2`` never restarts). Now serve keeps running, ``/readyz`` is
  503 naming ``telegram.connection`` and the error, and once the API answers the connector
  connects by itself (backoff with jitter) and answers a message, once;
* **mid-run**: the API down for 60 s, past the poller's backoff cap (its steps are 0.2,
  0.4, 0.8, 1.6, 3.2, 6.4 s … up to 30 s); ``GEODE_TEST_OUTAGE_S=12`` shortens it for a
  quick local run.
  The service keeps running, ``/readyz`` says the intake is down, a message sent during
  the outage is answered once when the API is back.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bots.testing.telegram import FakeTelegramServer
from tests.scenarios._serve_proc import free_port, serve_env, start_serve, stop, write_home

TOKEN = "123456:OUTAGE-TEST-TOKEN"
CHAT = -100777
FINAL = "Done: the answer."
#: how long the mid-run outage lasts (a minute, past the backoff cap; shorter by hand only)
OUTAGE_S = float(os.environ.get("GEODE_TEST_OUTAGE_S", "60"))


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramServer]:
    srv = FakeTelegramServer(token=TOKEN, bot_username="geode_bot")
    srv.listen_port = free_port()
    try:
        yield srv
    finally:
        await srv.stop()


def _home(tmp_path: Path, port: int) -> tuple[Path, dict[str, str]]:
    home = write_home(tmp_path, f"""
[channels.telegram]
base_url = "http://127.0.0.1:{port}/bot"
base_file_url = "http://127.0.0.1:{port}/file/bot"
poll_timeout_s = 1
lease_ttl_s = 1.5
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
    work = tmp_path / "work"
    work.mkdir()
    env = serve_env(home, work, final=FINAL, drop_prefix="TELEGRAM_", TELEGRAM_BOT_TOKEN=TOKEN)
    return home, env


async def _readyz(env: dict[str, str]) -> tuple[int, dict[str, Any]] | None:
    url = f"http://127.0.0.1:{env['GEODE_HEALTH_PORT']}/readyz"
    try:
        async with aiohttp.ClientSession() as s, s.get(url, timeout=aiohttp.ClientTimeout(
                total=5)) as r:
            return r.status, await r.json()
    except (aiohttp.ClientError, TimeoutError):
        return None


async def _wait_readyz(
    env: dict[str, str], proc: asyncio.subprocess.Process, pred: Any, within: float
) -> tuple[int, dict[str, Any]]:
    deadline = time.monotonic() + within
    last = None
    while time.monotonic() < deadline:
        assert proc.returncode is None, f"serve exited {proc.returncode}"
        last = await _readyz(env)
        if last is not None and pred(*last):
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"/readyz never matched; last: {last}")


def _finals_for(fake: FakeTelegramServer, mid: int) -> list[object]:
    return [s for s in fake.sent if s.plain_text == FINAL and s.reply_to_message_id == mid]


def _log(home: Path) -> str:
    return (home / "serve.log").read_text(errors="replace")


async def test_unreachable_at_start_keeps_running_and_connects_by_itself(
    fake: FakeTelegramServer, tmp_path: Path
) -> None:
    home, env = _home(tmp_path, fake.listen_port)
    proc = await start_serve(home, env)  # nothing listens on the API's port yet
    try:
        status, body = await _wait_readyz(
            env, proc, lambda st, b: "attempt" in b.get("checks", {}).get(
                "telegram.connection", {}).get("detail", ""), within=30)
        assert status == 503
        conn = body["checks"]["telegram.connection"]
        assert conn["ok"] is False
        assert "cannot reach the Telegram Bot API" in conn["detail"], conn
        assert body["checks"]["connectors"]["ok"] is False
        assert "telegram" in body["checks"]["connectors"]["detail"]
        await asyncio.sleep(2.0)  # a few attempts: still running, never exit 2
        assert proc.returncode is None, _log(home)

        await fake.start()  # the API is back: the connector connects by itself
        update = fake.user_says(CHAT, "@geode_bot hello after the blip", from_user=42)
        mid = fake.message_id_for(update)
        await fake.wait_until(lambda: _finals_for(fake, mid), within=45)
        await _wait_readyz(env, proc, lambda st, b: st == 200, within=15)
        await asyncio.sleep(0.5)  # a wrong duplicate would show up now
    finally:
        await stop(proc)
    assert len(_finals_for(fake, mid)) == 1, fake.sent
    visible = [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)]
    assert visible == [FINAL], visible  # the answer, and nothing else in the chat
    text = _log(home)
    assert "connector.connect_failed" in text and "error_class" in text
    assert "Unclosed client session" not in text, text
    assert "Traceback" not in text, text
    assert proc.returncode == 0


@pytest.mark.timeout(300)  # the minute's outage, then up to a 30 s backoff step
async def test_unreachable_mid_run_reconnects_and_answers_once(
    fake: FakeTelegramServer, tmp_path: Path
) -> None:
    await fake.start()
    home, env = _home(tmp_path, fake.listen_port)
    proc = await start_serve(home, env)
    try:
        u1 = fake.user_says(CHAT, "@geode_bot before", from_user=42)
        m1 = fake.message_id_for(u1)
        await fake.wait_until(lambda: _finals_for(fake, m1), within=40)

        await fake.stop()  # the Bot API goes away
        down_at = time.monotonic()
        u2 = fake.user_says(CHAT, "@geode_bot during the outage", from_user=42)
        m2 = fake.message_id_for(u2)
        _status, body = await _wait_readyz(
            env, proc, lambda st, b: st == 503 and not b["checks"].get(
                "telegram.intake", {}).get("ok", True), within=20)
        assert "getUpdates failing" in body["checks"]["telegram.intake"]["detail"], body
        await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
        assert proc.returncode is None, _log(home)

        await fake.start()  # same port: the poller's next attempt gets through
        await fake.wait_until(lambda: _finals_for(fake, m2), within=45)
        await _wait_readyz(env, proc, lambda st, b: st == 200, within=15)
        await asyncio.sleep(0.5)
    finally:
        await stop(proc)
    for m in (m1, m2):
        assert len(_finals_for(fake, m)) == 1, (m, fake.sent)
    visible = [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)]
    assert visible == [FINAL, FINAL], visible
    text = _log(home)
    assert "telegram.poll_failed" in text
    assert "Unclosed client session" not in text
    assert proc.returncode == 0
