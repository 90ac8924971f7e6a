"""The database going away for a moment (#38 finding 1): a turn whose store writes fail on a
lost connection is not dropped. Once the store answers again the turn is picked up from its
records (resumed from its checkpoint, or its recorded answer delivered): every message is
answered exactly once, nothing stays ``running``, and a file edit is applied once.

The outage is made in the store object of the running daemon: for a moment every
transaction raises what SQLAlchemy raises when PostgreSQL restarts under it (an
``OperationalError`` with ``connection_invalidated``), on SQLite and on PostgreSQL alike. The
chaos scenario (tests/scenarios/test_pg_chaos.py) restarts a real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from geode.messages import Message
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.store._retry import is_transient
from geode.store.models import receipts_table
from tests.bots.conftest import CHAT, binding, finals, settled


class Outage:
    """Every transaction of ``store`` fails like a PostgreSQL restart while ``down``."""

    def __init__(self) -> None:
        self.until = 0.0
        self.failed = 0

    def start(self, seconds: float) -> None:
        if self.until == 0.0:  # once per test
            self.until = time.monotonic() + seconds

    def check(self) -> None:
        if time.monotonic() < self.until:
            self.failed += 1
            raise OperationalError(
                "SELECT 1", {}, ConnectionResetError("server closed the connection unexpectedly"),
                connection_invalidated=True)

    def install(self, store: Any) -> None:
        for name in ("run_write", "run_read"):
            real = getattr(store, name)
            setattr(store, name, self._wrap(real))
        real_later = store.run_write_later

        async def later(fn: Any, *, on_error: Callable[[Exception], None]) -> None:
            try:
                self.check()
            except Exception as exc:
                on_error(exc)
                return
            await real_later(fn, on_error=on_error)

        store.run_write_later = later
        for name in ("write", "read"):
            store.__dict__[name] = self._wrap_cm(getattr(store, name))

    def _wrap(self, real: Any) -> Any:
        async def call(fn: Any) -> Any:
            self.check()
            result = await real(fn)
            self.check()  # the connection broke at COMMIT: committed, but the caller is told not
            return result

        return call

    def _wrap_cm(self, real: Any) -> Any:
        @contextlib.asynccontextmanager
        async def cm() -> AsyncIterator[Any]:
            self.check()
            async with real() as conn:
                yield conn

        return cm


def test_the_outage_error_is_transient() -> None:
    with pytest.raises(OperationalError) as info:
        o = Outage()
        o.start(10)
        o.check()
    assert is_transient(info.value)
    assert not is_transient(ValueError("no"))


EDIT = {"path": "log.txt", "old_string": "END", "new_string": "x\nEND"}


def _edits_then_answers(request: ModelRequest) -> object:
    """A user's message gets one edit_file call appending a line; its result gets the answer."""
    last: Message = request.messages[-1]
    if last.role == "user" and "(id " in (last.text or ""):
        return ToolCall("edit_file", EDIT)
    for m in reversed(request.messages):
        if m.role == "user" and m.text and "(id " in m.text:
            return f"answer to: {m.text.rsplit('): ', 1)[-1]}"
    return "answer to: ?"


@pytest.mark.parametrize(("dialect", "point"), [
    # the intake's claim committed / the turn accepted, then the pump's next step fails:
    # the claimed event is recovered once the store answers
    ("sqlite", "recorded"), ("sqlite", "turn_accepted"),
    ("sqlite", "progress_started"), ("sqlite", "tool_call"), ("sqlite", "turn_finished"),
    ("sqlite", "final_recorded"), ("postgres", "tool_call"), ("postgres", "turn_finished"),
])
async def test_a_store_outage_during_a_turn_is_ridden_out(
    request: pytest.FixtureRequest, make_stack: Any, fake: Any, home: Path, point: str,
    dialect: str,
) -> None:
    kw: dict[str, Any] = {}
    if dialect == "postgres":
        kw["store_url"] = request.getfixturevalue("pg_store_url")
    outage = Outage()

    def fault(p: str) -> None:
        if p == point:
            outage.start(0.6)

    ws = home / "ws-edit"
    ws.mkdir()
    (ws / "log.txt").write_text("END\n")
    provider = ScriptedProvider([_edits_then_answers], repeat_last=True)
    stack = make_stack(provider=provider, fault=fault,
                       bindings=[binding(tools=["edit_file"], workspace=str(ws))], **kw)
    await stack.start()
    outage.install(stack.store)

    fake.user_says(CHAT, "@geode_bot first", from_user=42)
    await fake.wait_until(lambda: outage.failed, within=20)  # the outage hit the turn
    await fake.wait_until(lambda: finals(fake, "answer to: first"), within=20)
    # the thread goes on after the outage
    fake.user_says(CHAT, "@geode_bot second", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: second"), within=20)
    await settled(stack, within=10)
    await asyncio.sleep(0.3)  # a (wrong) duplicate would show up now

    assert len(finals(fake, "answer to: first")) == 1
    assert len(finals(fake, "answer to: second")) == 1
    # every edit that ran is one line, recorded once: none applied twice (an edit whose
    # receipt could not be written during the outage did not run, and the model was told)
    lines = (ws / "log.txt").read_text().count("x\n")
    async with stack.store.read() as conn:
        done = (await conn.execute(select(func.count()).select_from(receipts_table).where(
            receipts_table.c.tool == "edit_file", receipts_table.c.status == "done"))
        ).scalar_one()
    assert 1 <= lines <= 2
    assert lines == done
    # no "Something went wrong" or "could not finish" in the thread
    assert not [s for s in fake.sent if "⚠️" in s.plain_text], [s.plain_text for s in fake.sent]


async def test_timeline_rows_written_during_an_outage_are_written_when_it_ends(
    tmp_path: Path,
) -> None:
    from geode.store import open_store

    async with await open_store(f"sqlite:///{tmp_path / 'geode.db'}") as store:
        outage = Outage()
        outage.install(store)
        outage.start(0.5)
        await store.timeline.append_many(session_id="s1", rows=[
            {"turn_id": "t1", "kind": "turn.started", "payload": {"n": 1}}])
        assert outage.failed
        async with asyncio.timeout(10):
            while time.monotonic() < outage.until:
                await asyncio.sleep(0.05)
            while not await store.timeline.list("s1"):
                await asyncio.sleep(0.1)
        rows = await store.timeline.list("s1")
        assert [r.kind for r in rows] == ["turn.started"]
        assert store.timeline.failures == 0


async def test_a_turn_that_fails_on_a_bug_says_so_in_its_thread(make_stack: Any, fake: Any
                                                                ) -> None:
    """Not the database: a job that raises is not retried, but its turn is ended with a
    line in the thread; its event is not left ``running`` with nobody to run it."""
    raised = []

    def fault(p: str) -> None:
        if p == "turn_finished" and not raised:
            raised.append(p)
            raise RuntimeError("a bug")

    stack = make_stack(fault=fault)
    await stack.start()
    fake.user_says(CHAT, "@geode_bot boom", from_user=42)
    await fake.wait_until(
        lambda: [s for s in fake.sent if "Something went wrong (RuntimeError)" in s.plain_text],
        within=20)
    await settled(stack, within=10)
    fake.user_says(CHAT, "@geode_bot after", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: after"), within=20)
