"""Two real `geode serve` replicas on one PostgreSQL store and one Telegram token, active-active;
kill -9 the one running a turn: the other takes its threads over and every message still gets
exactly one final reply (and enters its session once)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from bots.testing.telegram import FakeTelegramServer
from tests.scenarios._serve_proc import kill_9, start_serve, stop
from tests.scenarios.test_telegram_kill import CHAT, TOKEN
from tests.scenarios.test_telegram_kill import _finals_for as finals_for
from tests.scenarios.test_telegram_kill import _home as telegram_home
from tests.scenarios.test_telegram_kill import _progress_shown as progress_shown


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as srv:
        yield srv


def _replica(tmp_path: Path, name: str, fake: FakeTelegramServer,
             store_url: str) -> tuple[Path, dict[str, str]]:
    home, env = telegram_home(tmp_path, fake, name=name, store=store_url,
                              channel_extra="max_concurrent_threads = 1")
    # A turn's model call outlasts the other replica's claim of the next thread even on a
    # loaded machine: a replica that finishes its first turn before its peer claimed
    # anything would run two of the four threads (and this test is about one each).
    script = Path(env["GEODE_SCRIPTED_MODEL"])
    script.write_text(json.dumps({**json.loads(script.read_text()), "latency": 2.5}))
    return home, env


async def _ready(env: dict[str, str], proc: asyncio.subprocess.Process) -> None:
    """Wait until the replica answers /readyz (its channel layer is up)."""
    url = f"http://127.0.0.1:{env['GEODE_HEALTH_PORT']}/readyz"
    async with aiohttp.ClientSession() as http:
        for _ in range(300):
            assert proc.returncode is None, "replica exited while starting"
            try:
                async with http.get(url) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"{url} never became ready")


async def _holders(store_url: str) -> dict[str, int]:
    """thread root -> pid of the replica holding it (owners are ``host:pid:random``)."""
    from bots.store.leases import ThreadLeases
    from geode.store import open_store

    async with await open_store(store_url, migrate=False) as store:
        held = await ThreadLeases(store=store, owner="", ttl_s=1).holders("telegram", "123456")
    return {root: int(owner.split(":")[1]) for (_, root), owner in held.items()}


async def test_kill_9_of_a_busy_replica_its_threads_are_answered_once_by_the_other(
    pg_store_url: str, fake: FakeTelegramServer, tmp_path: Path
) -> None:
    home_a, env_a = _replica(tmp_path, "a", fake, pg_store_url)
    home_b, env_b = _replica(tmp_path, "b", fake, pg_store_url)
    a = await start_serve(home_a, env_a)
    b = None
    try:
        await fake.wait_until(lambda: fake.calls_to("getUpdates"), within=30)
        b = await start_serve(home_b, env_b)
        await _ready(env_b, b)  # b is up (and a standby for polling)
        mids = [fake.message_id_for(fake.user_says(CHAT, f"@geode_bot q{i}", from_user=42))
                for i in range(4)]
        # one thread at a time per replica: two turns run, one on each replica
        await fake.wait_until(lambda: sum(progress_shown(fake, m) for m in mids) >= 2,
                              within=30)
        holders = await _holders(pg_store_url)
        running = {holders[str(m)] for m in mids if progress_shown(fake, m)}
        assert running == {a.pid, b.pid}, (holders, a.pid, b.pid)
        victim = a if holders[str(mids[0])] == a.pid else b
        await kill_9(victim)
        survivor = b if victim is a else a

        later = fake.message_id_for(fake.user_says(CHAT, "@geode_bot after", from_user=42))
        await fake.wait_until(lambda: all(finals_for(fake, m) for m in [*mids, later]),
                              within=60)
        await asyncio.sleep(0.5)  # let any (wrong) duplicate show up before counting
        assert survivor.returncode is None
    finally:
        await stop(a)
        if b is not None:
            await stop(b)

    for m in [*mids, later]:
        assert len(finals_for(fake, m)) == 1, (m, fake.sent)
    assert not [c for c in fake.calls_to("getUpdates") if c.status == 409]

    from geode.store import open_store

    async with await open_store(pg_store_url, migrate=False) as store:
        for m, text in [*((m, f"q{i}") for i, m in enumerate(mids)), (later, "after")]:
            restored = await store.checkpointer(f"telegram:123456:{CHAT}:{m}").load()
            assert restored is not None
            said = [msg.text for msg in restored.messages if msg.role == "user" and msg.text]
            assert sum(t.endswith(f": {text}") for t in said) == 1, said

