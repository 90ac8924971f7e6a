"""The operator reads the store while `geode serve` writes it: nothing lost, nothing doubled.

Issue #30 finding 1: on SQLite, serve closed a descriptor of its own open database file at
start (``_private_db_file``), which drops every POSIX lock the process holds on it; the
first CLI read that closed its last connection then found itself alone, checkpointed and
DELETED the WAL serve kept writing into (``/proc/<pid>/fd`` showed ``geode.db-wal
(deleted)``). The CLI saw stale data and a kill -9 lost every commit since the read:
messages answered twice. Here a real serve (Telegram fake, slow scripted model) runs turns
while real ``geode`` CLI processes read the store, then serve is killed -9 and restarted:
every message is answered exactly once, is in its session once, the CLI saw what serve
wrote, and serve never held a deleted WAL. The PostgreSQL variant runs the same reads.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bots.testing.telegram import FakeTelegramServer
from tests.scenarios._serve_proc import (
    kill_9,
    serve_env,
    start_serve,
    stop,
    store_url_for,
    telegram_section,
    write_home,
)

TOKEN = "123456:CLI-READS-TOKEN"
CHAT = -100777
FINAL = "Done: the answer."


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as srv:
        yield srv


def _finals_for(fake: FakeTelegramServer, mid: int) -> list[object]:
    return [s for s in fake.sent if s.plain_text == FINAL and s.reply_to_message_id == mid]


def _progress_shown(fake: FakeTelegramServer, mid: int) -> bool:
    return any(s.reply_to_message_id == mid and "Working" in s.plain_text for s in fake.sent)


def _confirmed(fake: FakeTelegramServer, update_id: int) -> bool:
    return any(int(c.params.get("offset") or 0) > update_id for c in fake.calls_to("getUpdates"))


def _deleted_store_fds(pid: int) -> list[str]:
    """The store files serve holds open that were unlinked under it (a deleted WAL)."""
    out = []
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir() if fd_dir.exists() else ():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if "geode.db" in target and target.endswith("(deleted)"):
            out.append(target)
    return out


async def _cli(env: dict[str, str], home: Path, *args: str) -> str:
    """One `geode` CLI command as its own process (what an operator types beside serve)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "geode", *args, env=env, cwd=str(home),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, (args, out, err)
    return out.decode()


async def _sessions_seen(env: dict[str, str], home: Path) -> set[str]:
    return {r["id"] for r in json.loads(await _cli(env, home, "sessions", "list", "--json"))}


@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("postgres",
                                                            marks=pytest.mark.postgres)])
async def test_cli_reads_beside_serve_then_kill_9_lose_and_double_nothing(
    dialect: str, fake: FakeTelegramServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = store_url_for(request, tmp_path, dialect)
    home = write_home(tmp_path, f"""[store]
url = "{url}"
{telegram_section(fake)}
[[bindings]]
platform = "telegram"
channel = "{CHAT}"
allow_users = ["42"]
""")
    work = tmp_path / "work"
    work.mkdir()
    env = serve_env(home, work, final=FINAL, drop_prefix="TELEGRAM_", TELEGRAM_BOT_TOKEN=TOKEN)
    sqlite = dialect == "sqlite"
    deleted: list[str] = []

    async def watch_fds(pid: int) -> None:
        while True:
            deleted.extend(_deleted_store_fds(pid))
            await asyncio.sleep(0.05)

    proc = await start_serve(home, env)
    watcher = asyncio.create_task(watch_fds(proc.pid)) if sqlite else None
    try:
        await fake.wait_until(lambda: fake.calls_to("getUpdates"), within=30)
        first = [fake.user_says(CHAT, f"@geode_bot first {i}", from_user=42) for i in range(3)]
        firsts = [fake.message_id_for(u) for u in first]
        await fake.wait_until(lambda: all(_progress_shown(fake, m) for m in firsts), within=30)

        # The operator looks while the turns run: each read is a process that opens the
        # store, reads and closes its last connection.
        want = {f"telegram:123456:{CHAT}:{m}" for m in firsts}
        for _ in range(20):
            seen = await _sessions_seen(env, home)
            if want <= seen:
                break
            await asyncio.sleep(0.3)
        assert want <= seen, (want, seen)  # the CLI sees what serve committed
        await _cli(env, home, "usage")

        # Commits after the reads: on the old code they went into a WAL nobody else saw.
        second = [fake.user_says(CHAT, f"@geode_bot second {i}", from_user=42) for i in range(3)]
        seconds = [fake.message_id_for(u) for u in second]
        await fake.wait_until(lambda: all(_finals_for(fake, m) for m in firsts), within=40)
        await fake.wait_until(lambda: _confirmed(fake, second[-1]), within=30)
        await fake.wait_until(lambda: all(_progress_shown(fake, m) for m in seconds),
                              within=30)
        await _sessions_seen(env, home)  # one more read, then the crash
        await kill_9(proc)
        if watcher is not None:
            watcher.cancel()
            watcher = None

        proc = await start_serve(home, env)
        everyone = firsts + seconds
        try:
            await fake.wait_until(lambda: all(_finals_for(fake, m) for m in everyone),
                                  within=60)
        except TimeoutError:
            pass  # asserted below, after the more telling deleted-WAL check
        await asyncio.sleep(0.5)  # let any (wrong) duplicate show up before counting
    finally:
        if watcher is not None:
            watcher.cancel()
        await stop(proc)

    assert deleted == [], f"serve wrote into a deleted store file: {sorted(set(deleted))}"
    for m in everyone:
        assert len(_finals_for(fake, m)) == 1, (m, fake.sent)
        visible = [c.plain_text for c in fake.messages_in(CHAT, from_bot=True)
                   if c.reply_to_message_id == m]
        assert visible.count(FINAL) == 1, visible

    from geode.store import open_store

    async with await open_store(url) as store:
        for m, text in zip(everyone, [f"first {i}" for i in range(3)]
                           + [f"second {i}" for i in range(3)], strict=True):
            restored = await store.checkpointer(f"telegram:123456:{CHAT}:{m}").load()
            assert restored is not None, m
            said = [msg.text for msg in restored.messages if msg.role == "user" and msg.text]
            assert sum(t.endswith(f": {text}") for t in said) == 1, said
        if sqlite:
            assert (await store.run_read(
                lambda c: c.exec_driver_sql("PRAGMA integrity_check").scalar())) == "ok"
