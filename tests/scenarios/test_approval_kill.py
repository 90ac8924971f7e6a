"""kill -9 of a real `geode serve` while an approval request waits in a Telegram thread.

The daemon (subprocess, Telegram fake, scripted model) posts the request for a
``write_file`` of a binding's ``approve`` list and is SIGKILLed while it waits. The
approver's click comes after the restart, or while the daemon is down (queued at the fake,
caught up after the restart). Either way the SAME request row is honoured: one request
message, the tool runs once, one final answer, the row approved by the clicker. On SQLite
and on PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

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

TOKEN = "123456:APPROVAL-KILL-TOKEN"
CHAT = -100123
FINAL = "Done: the notes are written."
WRITE = {"path": "notes.txt", "content": "hello\nworld\n"}


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as srv:
        yield srv


def _home(tmp_path: Path, fake: FakeTelegramServer, store_url: str) -> tuple[Path, dict[str, str]]:
    home = write_home(tmp_path, f"""[store]
url = "{store_url}"
{telegram_section(fake)}
[[bindings]]
platform = "telegram"
channel = "{CHAT}"
allow_users = ["42", "43"]
tools = ["read_file"]
approve = ["write_file"]
approvers = ["43"]
""")
    work = tmp_path / "work"
    work.mkdir()
    env = serve_env(home, work, final=FINAL, drop_prefix="TELEGRAM_", TELEGRAM_BOT_TOKEN=TOKEN)
    # the model proposes the write; once it sees the result it answers (a resumed turn's
    # new session replays the script from its start)
    step = {"after_results": FINAL, "otherwise": {"tool": "write_file", "input": WRITE}}
    script = work / "approval-script.json"
    script.write_text(json.dumps({"latency": 0.2, "script": [step, step, step]}))
    env["GEODE_SCRIPTED_MODEL"] = str(script)
    return home, env


def _requests(fake: FakeTelegramServer) -> list[Any]:
    return [s for s in fake.sent if s.method == "sendMessage" and "Approval needed" in s.plain_text]


def _finals(fake: FakeTelegramServer) -> list[Any]:
    return [s for s in fake.sent if s.plain_text == FINAL]


async def _rows(store_url: str, session: str) -> list[Any]:
    from bots.store import ApprovalRequests
    from geode.store import open_store

    async with await open_store(store_url) as store:
        return await ApprovalRequests(store=store).for_session(session)


async def _receipts(store_url: str, session: str) -> list[Any]:
    from geode.store import open_store

    async with await open_store(store_url) as store:
        return list(await store.receipts.list_for(session))


async def _recorded(store_url: str, session: str) -> bool:
    """The request row knows its posted message (a click on it finds the request)."""
    rows = await _rows(store_url, session)
    return bool(rows) and rows[0].message_id is not None


# Each timing on one dialect (the in-process tests of tests/bots/test_approvals_restart.py
# run both timings on both): two daemon starts per case are the cost of a real kill -9.
@pytest.mark.parametrize(("click", "dialect"), [("after_restart", "sqlite"),
                                                ("while_down", "postgresql")])
async def test_kill_9_while_an_approval_waits_then_the_click_is_honoured_once(
    click: str, dialect: str, fake: FakeTelegramServer, tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    import asyncio

    store_url = store_url_for(request, tmp_path, dialect)
    home, env = _home(tmp_path, fake, store_url)
    proc = await start_serve(home, env)
    try:
        await fake.wait_until(lambda: fake.calls_to("getUpdates"), within=30)
        mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot write the notes",
                                                 from_user=42))
        session = f"telegram:123456:{CHAT}:{mid}"
        await fake.wait_until(lambda: _requests(fake), within=30)
        async with asyncio.timeout(30):
            while not await _recorded(store_url, session):
                await asyncio.sleep(0.1)
        await kill_9(proc)
        (request,) = _requests(fake)
        assert not list(home.rglob("notes.txt"))

        if click == "while_down":
            fake.user_clicks(CHAT, request.message_id, from_user=43, button="Approve")
        proc = await start_serve(home, env)
        if click == "after_restart":
            polls = len(fake.calls_to("getUpdates"))
            await fake.wait_until(lambda: len(fake.calls_to("getUpdates")) > polls, within=30)
            fake.user_clicks(CHAT, request.message_id, from_user=43, button="Approve")
        await fake.wait_until(lambda: _finals(fake), within=40)
        await fake.wait_until(lambda: fake.calls_to("answerCallbackQuery"), within=20)
    finally:
        await stop(proc)

    written = list(home.rglob("notes.txt"))
    assert [p.read_text() for p in written] == ["hello\nworld\n"]
    assert len(_finals(fake)) == 1
    assert len(_requests(fake)) == 1  # the same request, not a second one
    (row,) = await _rows(store_url, session)
    assert (row.status, row.decided_by, row.decided_by_name) == ("approved", "43", "User43")
    assert row.message_id == str(request.message_id)
    receipts = await _receipts(store_url, session)
    assert [(r.tool, r.status) for r in receipts] == [("write_file", "done")]
    shown = next(m for m in fake.messages_in(CHAT, from_bot=True)
                 if m.message_id == request.message_id)
    assert shown.plain_text.startswith("✅ write_file (") and "(43)" in shown.plain_text
