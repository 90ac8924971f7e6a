"""Chaos (#38): two real ``geode serve`` replicas on a PostgreSQL of their own, the Telegram
fake and a file-editing model in a process of their own, messages arriving all along; the
database is restarted (``pg_ctl restart -m fast``), a replica is killed -9 (and started
again), then the database is stopped for 10 s and, later, for 60 s. Afterwards, without an operator:

* every message is answered exactly once (one message in the chat says its answer);
* no file edit is applied twice (each turn appends its tag to one shared file);
* no progress placeholder ("⏳ …") is left in the chat;
* the intake is alive: a message sent after it all is answered.

``GEODE_CHAOS_LONG_OUTAGE_S=0`` leaves the 60 s outage out, for a quick local run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.scenarios._private_pg import PrivatePostgres, pg_bin
from tests.scenarios._serve_proc import REPO, free_port, kill_9, start_serve, stop

# the suite's 120 s per test is tight for ~75 s of scenario on a loaded CI machine
pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(300)]

TOKEN = "123456:TEST-TOKEN"
CHAT = -100777
USER = 42
LEASE_TTL_S = 3.0
#: each model call takes this long: a turn (edit, then answer) about twice it
MODEL_LATENCY_S = 0.5


class Fakes:
    """The ``_chaos_fakes`` child: JSON line in, JSON line out."""

    def __init__(self, proc: asyncio.subprocess.Process, ready: dict[str, Any]) -> None:
        self.proc = proc
        self.ready = ready

    async def call(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
        await self.proc.stdin.drain()
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the fakes' process exited")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply

    async def say(self, text: str) -> int:
        return int((await self.call("say", chat=CHAT, text=text, user=USER))["message_id"])

    async def answered(self, tags: list[str]) -> set[str]:
        return set((await self.call("answered", chat=CHAT, tags=tags))["answered"])


@contextlib.asynccontextmanager
async def fakes_process(latency: float, log: Path) -> AsyncIterator[Fakes]:
    with log.open("ab") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(Path(__file__).with_name("_chaos_fakes.py")),
            json.dumps({"token": TOKEN, "latency": latency}),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        yield Fakes(proc, json.loads(line))
    finally:
        if proc.returncode is None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                proc.kill()
                await proc.wait()


def replica_home(root: Path, name: str, *, fakes: Fakes, store_url: str, workspace: Path,
                 lanes: int = 6) -> tuple[Path, dict[str, str]]:
    """A replica's home (config.toml) and environment: the model behind the fakes, the
    shared store, one binding whose turns edit files in the shared ``workspace``."""
    tg = fakes.ready["telegram"]
    home = root / name
    home.mkdir()
    (home / "config.toml").write_text(f"""
[model]
default = "openai:chaos-model"

[store]
url = "{store_url}"

[lanes]
global_cap = {lanes}
channel_cap = {lanes}

[channels.telegram]
base_url = "{tg["base_url"]}"
base_file_url = "{tg["base_file_url"]}"
poll_timeout_s = 1
lease_ttl_s = {LEASE_TTL_S}
progress_edit_interval_s = 0
stream = false
progress_after_ms = 0
pump_interval_s = 0.2
rate_group_per_min = 0

[[bindings]]
platform = "telegram"
channel = "{CHAT}"
allow_users = ["{USER}"]
tools = ["edit_file"]
workspace = "{workspace}"
""")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GEODE_", "TELEGRAM_", "OPENAI_"))}
    env.update(
        GEODE_HOME=str(home), GEODE_HEALTH_PORT=str(free_port()),
        TELEGRAM_BOT_TOKEN=TOKEN, OPENAI_BASE_URL=fakes.ready["model"]["base_url"],
        OPENAI_API_KEY="chaos",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
    )
    return home, env


async def until_ready(env: dict[str, str], proc: asyncio.subprocess.Process,
                      within: float = 60) -> None:
    url = f"http://127.0.0.1:{env['GEODE_HEALTH_PORT']}/readyz"
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            assert proc.returncode is None, "replica exited while starting"
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(url) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.2)
    raise AssertionError(f"{url} never became ready")


async def until_answered(fakes: Fakes, tags: list[str], within: float) -> set[str]:
    deadline = time.monotonic() + within
    while True:
        done = await fakes.answered(tags)
        if len(done) == len(tags) or time.monotonic() > deadline:
            return done
        await asyncio.sleep(0.2)


@pytest.fixture
def private_pg() -> Any:
    bin_dir = pg_bin()
    if bin_dir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL binaries missing under CI=true")
        pytest.skip("no /usr/lib/postgresql/*/bin (initdb, pg_ctl)")
    pg = PrivatePostgres(bin_dir=bin_dir)
    try:
        pg.init()
        yield pg
    finally:
        pg.close()


async def test_replicas_ride_out_restarts_outages_and_a_kill(
    private_pg: PrivatePostgres, tmp_path: Path
) -> None:
    workspace = tmp_path / "shared-ws"
    workspace.mkdir()
    (workspace / "log.txt").write_text("END\n")
    long_outage = float(os.environ.get("GEODE_CHAOS_LONG_OUTAGE_S", "60") or 0)
    tags: list[str] = []
    mids: dict[str, int] = {}

    async def send(n: int) -> None:
        for _ in range(n):
            tag = f"q{len(tags)}"
            tags.append(tag)
            mids[tag] = await fakes.say(f"@geode_bot {tag}")
            await asyncio.sleep(0.1)

    async with fakes_process(MODEL_LATENCY_S, tmp_path / "fakes.log") as fakes:
        home_a, env_a = replica_home(tmp_path, "a", fakes=fakes, store_url=private_pg.url,
                                     workspace=workspace)
        home_b, env_b = replica_home(tmp_path, "b", fakes=fakes, store_url=private_pg.url,
                                     workspace=workspace)
        a = await start_serve(home_a, env_a)
        b: asyncio.subprocess.Process | None = None
        try:
            await until_ready(env_a, a)
            b = await start_serve(home_b, env_b)
            await until_ready(env_b, b)

            # 1. the database restarts under turns in flight
            await send(6)
            await asyncio.sleep(1.0)
            await private_pg.arun("restart")
            await send(6)
            await until_answered(fakes, tags, within=15)

            # 2. a replica is killed -9 with turns in flight, and started again
            await send(4)
            await asyncio.sleep(0.8)
            await kill_9(a)
            await send(2)
            a = await start_serve(home_a, env_a)
            await until_ready(env_a, a)

            # 3. the database is stopped for 10 s under load (messages keep coming)
            await send(4)
            await asyncio.sleep(0.8)
            await private_pg.arun("stop")
            await send(3)
            await asyncio.sleep(10.0)
            await private_pg.arun("start")
            if long_outage:
                await send(3)
                await asyncio.sleep(1.0)
                await private_pg.arun("stop")
                await asyncio.sleep(long_outage)
                await private_pg.arun("start")

            done = await until_answered(fakes, tags, within=45)
            assert done == set(tags), f"never answered: {sorted(set(tags) - done)}"

            # 4. the intake is alive afterwards
            await send(1)
            done = await until_answered(fakes, tags, within=20)
            assert done == set(tags), f"never answered: {sorted(set(tags) - done)}"
            await asyncio.sleep(1.0)  # a (wrong) duplicate would show up now
            assert a.returncode is None and b.returncode is None
            shown = (await fakes.call("bot_messages", chat=CHAT))["messages"]
        finally:
            await stop(a)
            if b is not None:
                await stop(b)

    texts = [m["text"] for m in shown]
    for tag in tags:
        assert texts.count(f"answer to: {tag}") == 1, (tag, texts)
    # no placeholder left: every progress message became the answer or was removed
    assert not [t for t in texts if t.startswith("⏳")], texts
    log = (workspace / "log.txt").read_text().splitlines()
    doubled = {t for t in tags if log.count(t) > 1}
    assert not doubled, f"edits applied twice: {sorted(doubled)}"
    print(f"chaos: {len(tags)} messages answered once; {sum(t in log for t in tags)} edits "
          f"applied once, none twice; {sum('⚠' in t for t in texts)} answers said ⚠️")
