"""A reminder set in a Telegram thread survives a restart and fires exactly once with two
real `geode serve` replicas on one PostgreSQL store: the one replica that set it stops, the
reminder comes due while nobody serves, then two replicas start together; one of them claims
it (the job row's run lease), records its message in the thread and the thread gets one
answer, under the ``/remind`` message."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bots.testing.telegram import FakeTelegramServer
from tests.scenarios._serve_proc import start_serve, stop
from tests.scenarios.test_replicas_kill import _ready
from tests.scenarios.test_telegram_kill import CHAT, TOKEN
from tests.scenarios.test_telegram_kill import _finals_for as finals_for
from tests.scenarios.test_telegram_kill import _home as telegram_home


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as srv:
        yield srv


async def test_a_reminder_missed_while_down_fires_once_with_two_replicas(
    pg_store_url: str, fake: FakeTelegramServer, tmp_path: Path
) -> None:
    from geode.daemon.scheduler import JobStore
    from geode.store import open_store

    home_a, env_a = telegram_home(tmp_path, fake, name="a", store=pg_store_url)
    home_b, env_b = telegram_home(tmp_path, fake, name="b", store=pg_store_url)
    a = await start_serve(home_a, env_a)
    b = None
    try:
        await fake.wait_until(lambda: fake.calls_to("getUpdates"), within=30)
        mid = fake.message_id_for(fake.user_says(CHAT, "/remind in 4s check the deploy",
                                                 from_user=42))
        await fake.wait_until(lambda: [s for s in fake.sent
                                       if s.plain_text.startswith("⏰ Reminder rem-")],
                              within=30)
        await stop(a)
        async with await open_store(pg_store_url, migrate=False) as store:
            (job,) = await JobStore(store=store).list()
        await asyncio.sleep(max(0.0, job.next_run + 1 - time.time()))  # due, nobody serves
        assert not finals_for(fake, mid)
        a = await start_serve(home_a, env_a)
        b = await start_serve(home_b, env_b)
        await _ready(env_a, a)
        await _ready(env_b, b)
        await fake.wait_until(lambda: finals_for(fake, mid), within=30)
        await asyncio.sleep(3)  # both replicas tick a few more times
    finally:
        await stop(a)
        if b is not None:
            await stop(b)
    assert len(finals_for(fake, mid)) == 1
    async with await open_store(pg_store_url, migrate=False) as store:
        (fired,) = await JobStore(store=store).list()
    assert (fired.id, fired.enabled, fired.run_count, fired.last_status) == (
        job.id, False, 1, "fired")
