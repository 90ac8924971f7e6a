"""kill -9 of a real `geode serve` between a file's upload and its record, then restart: the
file is in the thread once (the resumed turn reads the thread back and records the upload it
finds instead of sending it again), and the turn answers once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select

from bots.testing.discord import FakeDiscord
from tests.scenarios._serve_proc import (
    discord_config,
    kill_9,
    serve_env,
    start_serve,
    stop,
    write_home,
)

TOKEN = "fake-bot-token-sendfile"
FINAL = "Done: the log is in the thread."
LOG = b"worker-3 OOMKilled at 02:14\n"


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord(token=TOKEN, heartbeat_interval_ms=500) as srv:
        yield srv


def _home(tmp_path: Path, fake: FakeDiscord) -> tuple[Path, dict[str, str]]:
    home = write_home(tmp_path, discord_config(fake, 'tools = ["send_file"]'))
    env = serve_env(home, tmp_path, final=FINAL, drop_prefix="DISCORD_", DISCORD_BOT_TOKEN=TOKEN)
    # each session: send the file, and answer once the tool's result is in (a resumed
    # turn's first request already ends with it)
    step = {"after_results": FINAL, "otherwise": {"tool": "send_file",
                                                  "input": {"path": "pods.log"}}}
    Path(env["GEODE_SCRIPTED_MODEL"]).write_text(json.dumps({"script": [step, step]}))
    workspace = home / "workspaces" / f"discord-{fake.channel_id}"
    workspace.mkdir(parents=True)
    (workspace / "pods.log").write_bytes(LOG)
    return home, env


def _finals(fake: FakeDiscord, mid: int) -> int:
    try:
        msgs = fake.messages_in(mid)  # the thread on the mention
    except KeyError:
        return 0
    return sum(m["content"] == FINAL for m in msgs
               if str((m.get("author") or {}).get("id")) == str(fake.bot_id))


async def test_kill_9_between_upload_and_record_uploads_once(fake: FakeDiscord,
                                                              tmp_path: Path) -> None:
    home, env = _home(tmp_path, fake)
    proc = await start_serve(home, env)
    try:
        await fake.wait_for(lambda: fake.active_sessions, timeout=30)
        await asyncio.sleep(0.5)  # READY handled and the connector subscribed
        fake.hold_upload_answers()  # the file is posted; the answer never reaches serve
        mid = await fake.user_says(fake.channel_id, "the log?", mention_bot=True)
        await fake.wait_for(lambda: fake.uploads, timeout=30)
        await kill_9(proc)
        fake.release_upload_answers()

        proc = await start_serve(home, env)
        # the turn's answer comes after its send_file call: a second upload would be in
        await fake.wait_for(lambda: _finals(fake, mid), timeout=40)
    finally:
        await stop(proc)

    log = (home / "serve.log").read_text()[-3000:]
    assert [u.data for u in fake.uploads] == [LOG], log
    assert _finals(fake, mid) == 1, log

    from bots.store._tables import outbox_table
    from geode.store import open_store

    async with await open_store(f"sqlite:///{home / 'geode.db'}") as store:
        rows = await store.run_read(lambda c: c.execute(
            select(outbox_table.c.status, outbox_table.c.message_ids)
            .where(outbox_table.c.kind == "file")).all())
    assert [(r.status, r.message_ids) for r in rows] == [
        ("sent", [str(fake.uploads[0].message_id)])]
