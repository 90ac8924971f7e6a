"""The work a channel turn does per reply (Telegram stack, real store): what a plain turn
skips, and that what it skips is still done where it is needed.

Counts, never timings: the statements a turn runs on a table, the thread hops it makes.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from bots.store import ApprovalRequests
from bots.workspaces import binding_workspace
from geode.providers.scripted import ScriptedProvider
from geode.store import Store, open_store
from tests.bots._harness import calls_tool
from tests.bots.conftest import CHAT, binding, finals, settled, store_url_for
from tests.bots.test_approvals import WRITE


@contextmanager
def statements(store: Store, table: str) -> Iterator[list[str]]:
    """Every SQL statement naming ``table`` run on ``store`` (both of its engines) inside."""
    seen: list[str] = []

    def spy(_conn: Any, _cursor: Any, sql: str, *_a: Any) -> None:
        if table in sql:
            seen.append(sql)

    engines = [store.sync_engine, store.engine.sync_engine]
    for e in engines:
        event.listen(e, "before_cursor_execute", spy)
    try:
        yield seen
    finally:
        for e in engines:
            event.remove(e, "before_cursor_execute", spy)


async def test_a_turn_that_asked_for_no_approval_runs_no_approval_statement(
        make_stack: Any, fake: Any) -> None:
    stack = make_stack()
    await stack.start()
    with statements(stack.store, "channel_approvals") as seen:
        for i in range(3):
            fake.user_says(CHAT, f"@geode_bot hello {i}", from_user=42)
            await fake.wait_until(lambda i=i: finals(fake, f"answer to: hello {i}"), within=10)
    assert seen == []


@pytest.fixture
async def store(home: Path) -> AsyncIterator[Store]:
    s = await open_store(store_url_for(home))
    try:
        yield s
    finally:
        await s.aclose()


async def test_a_turn_ending_with_its_request_pending_cancels_it(store: Store) -> None:
    """The turn's end cancels what it left pending: requests it opened in this process, and
    (resumed after a restart) those the process before opened; a turn that asked nothing
    here and was not resumed has nothing (its requests were all opened through here)."""
    from tests.bots.store.test_approval_records import _request, _sid

    here = ApprovalRequests(store=store)
    sid = _sid()
    asked = await here.open(**_request(sid, turn_id="t-1"))
    assert await here.end_turn(sid, "t-1", resumed=False) == 1
    assert (await here.get(asked.id)).status == "cancelled"  # type: ignore[union-attr]

    before = await ApprovalRequests(store=store).open(**_request(sid, call="c2", turn_id="t-2"))
    restarted = ApprovalRequests(store=store)  # the process after a restart
    with statements(store, "channel_approvals") as seen:
        assert await restarted.end_turn(sid, "t-3", resumed=False) == 0
    assert seen == []
    assert await restarted.end_turn(sid, "t-2", resumed=True) == 1
    assert (await restarted.get(before.id)).status == "cancelled"  # type: ignore[union-attr]


async def test_a_resumed_turn_ending_before_it_asks_again_cancels_the_request_of_before(
        make_stack: Any, fake: Any) -> None:
    """Killed while its request waits, the turn is resumed after the restart past the
    recovery limit: it ends at once (it never asks again in the new process) and the request
    opened by the process before is cancelled, not left pending."""
    provider = ScriptedProvider([calls_tool("write_file", WRITE)], repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding(
        tools=["read_file"], approve=["write_file"], approvers=["43"])])
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot write the notes", from_user=42))
    session = f"telegram:123456:{CHAT}:{mid}"
    layer = stack.connector.layer
    async with asyncio.timeout(10):
        while not await layer.approvals.pending():
            await asyncio.sleep(0.05)
    await stack.crash()

    new_daemon = stack.new_daemon

    def no_resume(**kw: Any) -> Any:
        daemon = new_daemon(**kw)
        daemon.settings.loop.recovery_limit = 0
        return daemon

    stack.new_daemon = no_resume
    await stack.start()
    await fake.wait_until(
        lambda: any("could not finish (recovery limit" in s.plain_text for s in fake.sent),
        within=15)
    (rec,) = await stack.connector.layer.approvals.for_session(session)
    assert rec.status == "cancelled"


async def test_the_binding_folder_is_made_once_and_again_after_it_was_removed(
        make_stack: Any, fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    stack = make_stack()
    await stack.start()
    ws = binding_workspace(stack.home, stack.bindings[0])
    made: list[Path] = []
    real = Path.mkdir

    def mkdir(self: Path, *a: Any, **kw: Any) -> None:
        if self == ws and kw.get("parents"):  # not its own retry once the parent is made
            made.append(self)
        real(self, *a, **kw)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    import bots.turn.prepare

    resolved: list[Any] = []
    real_workspace = bots.turn.prepare.binding_workspace

    def workspace(home: Path, b: Any) -> Path:
        resolved.append(b)
        return real_workspace(home, b)

    monkeypatch.setattr(bots.turn.prepare, "binding_workspace", workspace)

    async def turn(text: str) -> None:
        fake.user_says(CHAT, f"@geode_bot {text}", from_user=42)
        await fake.wait_until(lambda: finals(fake, f"answer to: {text}"), within=10)

    for i in range(3):
        await turn(f"hello {i}")
    assert len(made) == 1 and ws.is_dir()
    shutil.rmtree(ws)  # an operator cleaned the workspaces while the daemon ran
    await turn("again")
    assert len(made) == 2 and ws.is_dir()
    assert len(resolved) <= 1  # the path is resolved on disk once, not per turn


async def test_a_quick_reply_starts_few_tasks_of_the_layer_and_the_loop(
        make_stack: Any, fake: Any) -> None:
    """Pins the asyncio tasks of one quick reply (a count, never a time): the thread's
    worker, the 👀 ack and the progress message's send (each beside the turn, which waits
    for neither), the turn (``/stop`` cancels it) and the loop's drive. Indicators, lanes,
    notices and observers start none until they have work. Not counted: the store's group
    commit (its own pins) and the HTTP client's and the fake server's tasks."""
    from tests.daemon.test_turn_tasks import tasks_made

    stack = make_stack(options={"typing_delay_s": 1.0})
    await stack.start()
    fake.user_says(CHAT, "@geode_bot warm up", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: warm up"), within=10)
    await settled(stack)
    with tasks_made() as made:
        fake.user_says(CHAT, "@geode_bot hello", from_user=42)
        await fake.wait_until(lambda: finals(fake, "answer to: hello"), within=10)
        await settled(stack)
    ours = sorted(m for m in made if m not in (
        "_GroupCommit._drain", "ClientRequest.write_bytes", "RequestHandler._handle_request"))
    assert ours == ["AgenticLoop._drive", "ProgressReporter._quiet",
                    "ProgressReporter._send_progress", "ThreadOrderedProcessor._work",
                    "on_display"]
