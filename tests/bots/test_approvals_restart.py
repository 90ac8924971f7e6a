"""Approvals that survive a restart (in-process daemon + Telegram fake, real store on SQLite
and PostgreSQL): a turn interrupted while its request waits resumes the SAME wait after the
restart (or on the replica that takes the thread over), the approver's decision is honoured
once, the tool runs once and the turn answers once; the expiry keeps counting from the
original request; /status shows the resumed wait and /stop cancels it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bots.workspaces import binding_workspace
from geode.providers.scripted import ScriptedProvider
from tests.bots._harness import calls_tool
from tests.bots.conftest import CHAT, Stack, binding, finals, store_url_for
from tests.bots.test_approvals import WRITE


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, home: Path) -> str:
    if request.param == "sqlite":
        return store_url_for(home)
    return str(request.getfixturevalue("pg_store_url"))


def _binding(**kw: Any) -> Any:
    kw.setdefault("approve", ["write_file"])
    kw.setdefault("approvers", ["43"])
    return binding(tools=["read_file"], **kw)


def _requests_posted(fake: Any) -> list[Any]:
    """Every request message the bot sent (sendMessage, not the edits of one)."""
    return [s for s in fake.sent
            if s.method == "sendMessage" and "Approval needed" in s.plain_text]


def _request_now(fake: Any, message_id: int) -> str:
    (msg,) = [m for m in fake.messages_in(CHAT, from_bot=True) if m.message_id == message_id]
    return str(msg.plain_text)


async def _one_request(stack: Stack, fake: Any) -> Any:
    """The posted request message, once its row records the message (a reply finds it)."""
    await fake.wait_until(lambda: _requests_posted(fake), within=10)
    layer = stack.connector.layer if stack.connector is not None else None
    assert layer is not None
    async with asyncio.timeout(10):
        while not [r for r in await layer.approvals.pending() if r.message_id]:
            await asyncio.sleep(0.05)
    return _requests_posted(fake)[0]


async def _requested(make_stack: Any, fake: Any, **stack_kw: Any) -> tuple[Stack, int, Any]:
    """A started stack (``stack_kw``: more of it, ``binding``: the binding's keywords) whose
    model proposed write_file on a mention: the stack, the thread's message id and the request
    message posted for 43 to approve."""
    provider = ScriptedProvider([calls_tool("write_file", WRITE)], repeat_last=True)
    bound = _binding(**stack_kw.pop("binding", {}))
    stack = make_stack(provider=provider, bindings=[bound], **stack_kw)
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot write the notes", from_user=42))
    return stack, mid, await _one_request(stack, fake)


async def _waiting_again(stack: Stack, mid: int) -> None:
    """Until the resumed turn of thread ``mid`` waits for its approver again."""
    layer = stack.connector.layer if stack.connector is not None else None
    assert layer is not None
    key = f"telegram:123456:{CHAT}:{mid}"
    async with asyncio.timeout(10):
        while not (key in layer.active and layer.active[key].waiting):
            await asyncio.sleep(0.05)


async def _rows_while_down(url: str, session: str) -> list[Any]:
    """The session's approval requests, read from the store while no daemon runs."""
    from bots.store import ApprovalRequests
    from geode.store import open_store

    async with await open_store(url) as store:
        return await ApprovalRequests(store=store).for_session(session)


def _session(mid: int) -> str:
    return f"telegram:123456:{CHAT}:{mid}"


async def _settle(stack: Stack) -> None:
    from tests.bots.conftest import settled

    await settled(stack)


async def test_a_wait_interrupted_by_a_restart_resumes_and_the_approval_after_it_runs_once(
    url: str, make_stack: Any, fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack, mid, req = await _requested(make_stack, fake, store_url=url)
    ws = binding_workspace(stack.home, stack.bindings[0])
    await stack.crash()  # the turn dies while it waits; nothing is finished

    await stack.start()
    layer = stack.connector.layer
    (pending,) = await layer.approvals.for_session(_session(mid))
    assert pending.status == "pending"  # the restart did not end the request
    await _waiting_again(stack, mid)
    # /status after the restart shows the resumed wait of the same request
    fake.user_says(CHAT, "/status", from_user=42, reply_to=req.message_id)
    await fake.wait_until(lambda: any(
        f"waiting for approval of write_file ({pending.short_id}) since" in s.plain_text
        for s in fake.sent), within=10)

    fake.user_says(CHAT, "/approve", from_user=43, reply_to=req.message_id)
    await fake.wait_until(lambda: finals(fake, "done"), within=15)
    await _settle(stack)
    assert (ws / "notes.txt").read_text() == "hello\nworld\n"
    assert len(finals(fake, "done")) == 1
    assert len(_requests_posted(fake)) == 1  # no second request message
    (rec,) = await layer.approvals.for_session(_session(mid))
    assert (rec.id, rec.status, rec.decided_by) == (pending.id, "approved", "43")
    assert _request_now(fake, req.message_id).startswith("✅ write_file (")
    receipts = await stack.store.receipts.list_for(_session(mid))
    assert [(r.tool, r.status) for r in receipts] == [("write_file", "done")]

    # the audit: the receipt names the approver; `geode sessions show --json` lists the
    # request (asked again after the restart) and the decision, with who and when
    assert (receipts[0].approved_by, receipts[0].approved_by_name) == ("43", "User43")
    info = await _sessions_show(stack, url, _session(mid), monkeypatch)
    assert [(r["tool"], r["approved_by"], r["approved_by_name"]) for r in info["receipts"]] == [
        ("write_file", "43", "User43")]
    approvals = [(a["kind"], a["resumed"], a["decision"], a["by_id"], a["by_name"])
                 for a in info["approvals"]]
    assert approvals == [("requested", False, None, "", ""), ("requested", True, None, "", ""),
                         ("decided", False, "approved", "43", "User43")]
    assert all(a["call_id"] == rec.call_id and a["at"] for a in info["approvals"])


async def _sessions_show(stack: Stack, url: str, session: str,
                         monkeypatch: pytest.MonkeyPatch) -> Any:
    """``geode sessions show SESSION --json`` against the stack's store."""
    import json
    import sys

    from typer.testing import CliRunner

    from geode.cli import cmd_sessions  # noqa: F401 - registers the command
    from geode.cli.app import app
    from geode.logging import configure_logging

    monkeypatch.setenv("GEODE_HOME", str(stack.home))
    monkeypatch.setenv("GEODE_STORE__URL", url)
    try:
        out = await asyncio.to_thread(CliRunner().invoke, app,
                                      ["sessions", "show", session, "--json"])
    finally:
        configure_logging(stream=sys.stderr)
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


async def test_clicks_made_while_the_daemon_is_down_are_caught_up_and_applied_once(
    url: str, make_stack: Any, fake: Any
) -> None:
    stack, mid, req = await _requested(make_stack, fake, store_url=url)
    ws = binding_workspace(stack.home, stack.bindings[0])
    await stack.crash()
    # while nothing runs: the approver clicks twice (a double click), both queued at Telegram
    fake.user_clicks(CHAT, req.message_id, from_user=43, button="Approve")
    fake.user_clicks(CHAT, req.message_id, from_user=43, button="Approve")

    await stack.start()
    await fake.wait_until(lambda: finals(fake, "done"), within=15)
    await fake.wait_until(lambda: len(fake.calls_to("answerCallbackQuery")) == 2, within=10)
    await _settle(stack)
    assert (ws / "notes.txt").read_text() == "hello\nworld\n"
    assert len(finals(fake, "done")) == 1
    assert len(_requests_posted(fake)) == 1
    answers = [c.params["text"] for c in fake.calls_to("answerCallbackQuery")]
    assert sum("approved by" in a and "already" not in a for a in answers) == 1, answers
    (rec,) = await stack.connector.layer.approvals.for_session(_session(mid))
    assert (rec.status, rec.decided_by, rec.decided_by_name) == ("approved", "43", "User43")
    receipts = await stack.store.receipts.list_for(_session(mid))
    assert [(r.tool, r.status) for r in receipts] == [("write_file", "done")]
    assert _request_now(fake, req.message_id).startswith("✅ write_file (")


async def test_the_expiry_counts_from_the_original_request_across_a_restart(
    make_stack: Any, fake: Any
) -> None:
    import time

    stack, mid, req = await _requested(make_stack, fake, binding={"approval_timeout_s": 2})
    provider = stack.provider
    await stack.crash()
    (before,) = await _rows_while_down(stack.store_url, _session(mid))
    while time.time() * 1000 <= before.expires_at:  # its time runs out while nothing runs
        await asyncio.sleep(0.1)

    await stack.start()
    await fake.wait_until(lambda: finals(fake, "done"), within=15)
    await _settle(stack)
    assert not list((stack.home / "workspaces").rglob("notes.txt"))
    (rec,) = await stack.connector.layer.approvals.for_session(_session(mid))
    assert rec.status == "expired" and rec.id == before.id
    assert (rec.requested_at, rec.expires_at) == (before.requested_at, before.expires_at)
    assert len(_requests_posted(fake)) == 1
    assert _request_now(fake, req.message_id).startswith("⌛ write_file (")
    told = [b.text_content for r in provider.calls for m in r.messages
            for b in (m.content if isinstance(m.content, list) else [])
            if hasattr(b, "text_content") and "expired" in b.text_content]
    assert told and "nobody decided within 2s" in told[-1]


async def test_stop_during_a_resumed_wait_cancels_the_request(make_stack: Any, fake: Any) -> None:
    stack, mid, req = await _requested(make_stack, fake)
    await stack.crash()
    await stack.start()
    await _waiting_again(stack, mid)
    fake.user_says(CHAT, "/stop", from_user=42, reply_to=req.message_id)
    await fake.wait_until(
        lambda: any(s.plain_text.startswith("⏹ Stopped") for s in fake.sent), within=10)
    await fake.wait_until(
        lambda: _request_now(fake, req.message_id).startswith("⏹ write_file ("), within=10)
    (rec,) = await stack.connector.layer.approvals.for_session(_session(mid))
    assert rec.status == "cancelled"
    assert "cancelled" in _request_now(fake, req.message_id)
    kinds = [r.kind for r in await stack.store.timeline.list(_session(mid))
             if r.payload.get("call_id") == rec.call_id]
    assert "approval.cancelled" in kinds
    assert not list((stack.home / "workspaces").rglob("notes.txt"))


async def test_the_replica_taking_the_thread_over_resumes_the_wait(
    make_stack: Any, fake: Any, home: Path
) -> None:
    url = store_url_for(home)
    stacks = []
    for n in range(2):
        provider = ScriptedProvider([calls_tool("write_file", WRITE)], repeat_last=True)
        stack = make_stack(provider=provider, bindings=[_binding()], store_url=url)
        if n:
            stack.home = home / "replica2"
            stack.home.mkdir()
        connector = await stack.start()
        stacks.append(stack)
    await fake.wait_until(lambda: connector.standby, within=10)  # the first one polls
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot write the notes", from_user=42))
    await fake.wait_until(lambda: _requests_posted(fake), within=10)
    victim = next(s for s in stacks if s.provider.calls)
    survivor = stacks[1] if victim is stacks[0] else stacks[0]
    await _one_request(victim, fake)
    c = victim.connector
    assert c is not None and c.layer is not None and c.lease is not None

    async def nothing(*args: Any, **kwargs: Any) -> None:  # kill -9: nothing is released
        return None

    c.layer.thread_leases.release_all = nothing  # type: ignore[method-assign]
    c.lease.release = nothing  # type: ignore[method-assign]
    await victim.crash()

    await _waiting_again(survivor, mid)  # after the leases expired
    req = _requests_posted(fake)[0]
    fake.user_says(CHAT, "/approve", from_user=43, reply_to=req.message_id)
    await fake.wait_until(lambda: finals(fake, "done"), within=15)
    await _settle(survivor)
    ws = binding_workspace(victim.home, victim.bindings[0])
    ws2 = binding_workspace(survivor.home, survivor.bindings[0])
    written = [p for p in (ws / "notes.txt", ws2 / "notes.txt") if p.exists()]
    assert [p.read_text() for p in written] == ["hello\nworld\n"]
    assert len(finals(fake, "done")) == 1
    assert len(_requests_posted(fake)) == 1
    (rec,) = await survivor.connector.layer.approvals.for_session(_session(mid))
    assert (rec.status, rec.decided_by) == ("approved", "43")
    receipts = await survivor.store.receipts.list_for(_session(mid))
    assert [(r.tool, r.status) for r in receipts] == [("write_file", "done")]
