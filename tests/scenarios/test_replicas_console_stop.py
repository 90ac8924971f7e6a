"""Stop clicked in the console of one `geode serve` replica stops the turn another replica
runs: two real serve processes on one store (PostgreSQL; and SQLite, two processes on one
database file), one Telegram token, a turn running on one of them, the thread's page
opened in the other's console and Stop clicked there. The turn stops as ``/stop`` would
("⏹ Stopped" in the thread, no answer), and the request is audited with the signed-in
identity."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from bots.testing.telegram import FakeTelegramServer
from tests.scenarios._serve_proc import free_port, start_serve, stop, store_url_for
from tests.scenarios.test_replicas_kill import _ready
from tests.scenarios.test_telegram_kill import CHAT, TOKEN
from tests.scenarios.test_telegram_kill import _finals_for as finals_for
from tests.scenarios.test_telegram_kill import _home as telegram_home
from tests.scenarios.test_telegram_kill import _progress_shown as progress_shown

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as srv:
        yield srv


def _replica(tmp_path: Path, name: str, fake: FakeTelegramServer,
             store_url: str) -> tuple[Path, dict[str, str], str]:
    """A replica with its console on a port of its own; its console's address."""
    home, env = telegram_home(tmp_path, fake, name=name, store=store_url)
    port = free_port()
    with (home / "config.toml").open("a") as config:
        config.write(f'\n[console]\nenabled = true\nlisten = "127.0.0.1:{port}"\n'
                     'operators = ["telegram:42"]\n')
    script = Path(env["GEODE_SCRIPTED_MODEL"])  # a turn that runs until it is stopped
    script.write_text(json.dumps({**json.loads(script.read_text()), "latency": 120}))
    return home, env, f"http://127.0.0.1:{port}"


async def _owner(store_url: str, mid: int) -> str:
    """The replica holding the thread of message ``mid`` (``host:pid:random``)."""
    from bots.store.leases import ThreadLeases
    from geode.store import open_store

    async with await open_store(store_url, migrate=False) as store:
        held = await ThreadLeases(store=store, owner="", ttl_s=1).holders("telegram", "123456")
    return held.get((str(CHAT), str(mid)), "")


async def _signed_in(env: dict[str, str], base: str) -> aiohttp.ClientSession:
    made = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "geode", "console", "link", "--as",
                         "telegram:42"], env=env, capture_output=True, text=True, check=True,
        timeout=60)
    token = re.search(r"token=([\w-]+)", made.stdout)
    assert token is not None, made.stdout + made.stderr
    http = aiohttp.ClientSession(base, cookie_jar=aiohttp.CookieJar(unsafe=True))
    async with http.post("/signin", data={"token": token.group(1)},
                         allow_redirects=False) as r:
        assert r.status == 303, await r.text()
    return http


@pytest.mark.parametrize("dialect", [
    pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
async def test_stop_in_one_replicas_console_stops_the_turn_running_on_the_other(
        dialect: str, request: pytest.FixtureRequest, fake: FakeTelegramServer,
        tmp_path: Path) -> None:
    store_url = (store_url_for(request, tmp_path, dialect) if dialect == "postgresql"
                 else f"sqlite:///{tmp_path / 'shared.db'}")
    home_a, env_a, console_a = _replica(tmp_path, "a", fake, store_url)
    home_b, env_b, console_b = _replica(tmp_path, "b", fake, store_url)
    a = await start_serve(home_a, env_a)
    b = None
    try:
        await _ready(env_a, a)
        b = await start_serve(home_b, env_b)
        await _ready(env_b, b)
        mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot long job", from_user=42))
        await fake.wait_until(lambda: progress_shown(fake, mid), within=60)
        owner = await _owner(store_url, mid)
        runs_on_a = owner.split(":")[1] == str(a.pid)
        assert owner.split(":")[1] == str(a.pid if runs_on_a else b.pid), owner
        # the console of the replica that does NOT run the turn
        env, base = (env_b, console_b) if runs_on_a else (env_a, console_a)
        http = await _signed_in(env, base)
        async with http:
            path = f"/threads/telegram%3A123456%3A{CHAT}%3A{mid}"
            async with http.get(path, headers={"Accept": "application/json"}) as r:
                page = await r.json()
            assert page["running"]["replica"] == owner
            async with http.get(path) as r:
                csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', await r.text())
            assert csrf is not None
            async with http.post(f"{path}/stop", data={"csrf": csrf.group(1)},
                                 headers={"Accept": "application/json"}) as r:
                assert r.status == 200, await r.text()
                asked = await r.json()
            assert asked["requested"] and asked["replica"] == owner
            await fake.wait_until(
                lambda: any(s.plain_text.startswith("⏹ Stopped") for s in fake.sent),
                within=30)
            async with asyncio.timeout(30):  # the page sees nothing running any more
                while True:
                    async with http.get(path, headers={"Accept": "application/json"}) as r:
                        if (await r.json())["running"] is None:
                            break
                    await asyncio.sleep(0.2)
        assert not finals_for(fake, mid)  # stopped, not answered
        assert a.returncode is None and b.returncode is None
    finally:
        await stop(a)
        if b is not None:
            await stop(b)

    from geode.store import open_store

    async with await open_store(store_url, migrate=False) as store:
        rows = await store.timeline.list(f"telegram:123456:{CHAT}:{mid}", limit=500)
    [asked_row] = [row for row in rows if row.kind == "console.stop"]
    assert asked_row.payload["by"] == "telegram:42" and asked_row.payload["requested"]
    assert asked_row.payload["replica"] == owner
