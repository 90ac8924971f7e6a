"""Approvals in the thread (text commands; Telegram stack, real store): a call of a tool in
the binding's ``approve`` list posts a request with the diff and waits; an approver's
/approve runs it once; a non-approver changes nothing; /deny and the expiry deny it and the
model is told who / why; /status shows the wait; /stop cancels it."""

from __future__ import annotations

import asyncio
from typing import Any

from bots.workspaces import binding_workspace
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider, ToolCall
from tests.bots._harness import calls_tool, tool_results
from tests.bots.conftest import CHAT, binding, finals

WRITE = {"path": "notes.txt", "content": "hello\nworld\n"}



def _request_message(fake: Any) -> Any:
    """The request message as it is now (its edits keep the request's diff below the
    outcome line; the command answers do not carry it)."""
    found = [m for m in fake.messages_in(CHAT, from_bot=True)
             if "Approval needed" in m.plain_text or "+++ b/notes.txt" in m.plain_text]
    return found[-1] if found else None


async def _posted(stack: Any, fake: Any) -> Any:
    """The request message, once it is filed under its thread (replies to it belong there)."""
    lay = stack.connector.layer

    async def filed() -> bool:
        req = _request_message(fake)
        return req is not None and await lay.index.thread_of(
            "telegram", lay.client.workspace, str(CHAT), str(req.message_id)) is not None

    for _ in range(200):
        if await filed():
            return _request_message(fake)
        await asyncio.sleep(0.05)
    raise AssertionError("the approval request was not posted")


def _approval_binding(**kw: Any) -> Any:
    kw.setdefault("approve", ["write_file"])
    kw.setdefault("approvers", ["43"])
    return binding(tools=["read_file"], **kw)


async def _asked(make_stack: Any, fake: Any, args: dict[str, Any] = WRITE, *,
                 tool: str = "write_file", text: str = "write the notes",
                 **binding_kw: Any) -> tuple[Any, int]:
    """A started stack (``binding_kw``: more of its approval binding) whose model calls
    ``tool`` with ``args`` on a mention saying ``text``: the stack and the mention's id."""
    provider = ScriptedProvider([calls_tool(tool, args)], repeat_last=True)
    stack = make_stack(provider=provider, bindings=[_approval_binding(**binding_kw)])
    await stack.start()
    return stack, fake.message_id_for(fake.user_says(CHAT, f"@geode_bot {text}", from_user=42))


async def _commands_done(stack: Any, fake: Any) -> None:
    """Every update received and recorded, and no command among them still running."""
    c = stack.connector
    async with asyncio.timeout(10):
        while fake.pending_updates or any(
                e.event.text.startswith("/") for e in
                await c.layer.inbound.unfinished(c.platform, c.workspace)):
            await asyncio.sleep(0.02)


async def test_an_approvers_reply_runs_the_write_once_and_a_strangers_changes_nothing(
    make_stack, fake
):
    stack, _ = await _asked(make_stack, fake)
    ws = binding_workspace(stack.home, stack.bindings[0])
    req = await _posted(stack, fake)
    text = req.plain_text
    assert "write_file notes.txt (new file)" in text
    assert "+hello" in text and "+world" in text  # the unified diff of the change
    assert "Approvers: 43" in text and "Expires at" in text and "id 42" in text

    fake.user_says(CHAT, "/status", from_user=42, reply_to=req.message_id)
    await fake.wait_until(
        lambda: any("waiting for approval of write_file" in s.plain_text for s in fake.sent),
        within=10)
    fake.user_says(CHAT, "/approve", from_user=42, reply_to=req.message_id)  # not an approver
    await _commands_done(stack, fake)
    # refused without a word in the thread (issue #30: each refusal posted was a flood lever)
    assert not any("Only 43 may approve" in s.plain_text for s in fake.sent)
    assert not (ws / "notes.txt").exists()

    fake.user_says(CHAT, "/approve", from_user=43, reply_to=req.message_id)
    await fake.wait_until(lambda: finals(fake, "done"), within=10)
    assert (ws / "notes.txt").read_text() == "hello\nworld\n"
    assert not any("Only 43 may approve" in s.plain_text for s in fake.sent)
    # the request message now shows the decision and who made it
    shown = _request_message(fake).plain_text
    assert shown.startswith("✅ write_file (") and "approved by" in shown and "(43)" in shown
    # a second click changes nothing and says so
    fake.user_says(CHAT, "/approve", from_user=43, reply_to=req.message_id)
    await fake.wait_until(
        lambda: any("already" in s.plain_text for s in fake.sent), within=10)
    assert len(finals(fake, "done")) == 1


async def test_deny_tells_the_model_who_denied_and_nothing_is_written(make_stack, fake):
    stack, _ = await _asked(make_stack, fake)
    provider = stack.provider
    short = (await _posted(stack, fake)).plain_text.split("(", 1)[1].split(")", 1)[0]
    fake.user_says(CHAT, f"/deny {short}", from_user=43)  # by id, not as a reply
    await fake.wait_until(lambda: finals(fake, "done"), within=10)
    assert not list((stack.home / "workspaces").rglob("notes.txt"))
    told = [t for t in tool_results(provider) if t.startswith("denied by approval: ")]
    assert told and "denied by" in told[-1].removeprefix("denied by approval: ")
    assert "(43)" in told[-1]
    assert _request_message(fake).plain_text.startswith("🚫 write_file (")


async def test_no_decision_in_time_is_denied_as_expired(make_stack, fake):
    stack, mid = await _asked(make_stack, fake, approval_timeout_s=1)
    provider = stack.provider
    await fake.wait_until(lambda: finals(fake, "done"), within=15)
    assert not list((stack.home / "workspaces").rglob("notes.txt"))
    assert any("expired" in t for t in tool_results(provider))
    expired = [r for r in await stack.store.timeline.list(f"telegram:123456:{CHAT}:{mid}")
               if r.kind == "approval.expired"]
    assert len(expired) == 1 and expired[0].payload["decision"] == "deny"
    assert _request_message(fake).plain_text.startswith("⌛ write_file (")


async def test_without_approvers_the_call_is_denied_and_the_model_told_why(make_stack, fake):
    stack, _ = await _asked(make_stack, fake, approvers=[])
    provider = stack.provider
    await fake.wait_until(lambda: finals(fake, "done"), within=10)
    assert any("names no approvers" in t for t in tool_results(provider))
    assert _request_message(fake) is None  # nothing was posted: nobody could answer it


async def test_stop_cancels_a_waiting_request(make_stack, fake):
    stack, _ = await _asked(make_stack, fake)
    req = await _posted(stack, fake)
    fake.user_says(CHAT, "/stop", from_user=42, reply_to=req.message_id)
    await fake.wait_until(
        lambda: any(s.plain_text.startswith("⏹ Stopped") for s in fake.sent), within=10)
    await fake.wait_until(
        lambda: _request_message(fake).plain_text.startswith("⏹ write_file ("), within=10)
    fake.user_says(CHAT, "/approve", from_user=43, reply_to=req.message_id)
    await fake.wait_until(
        lambda: any("cancelled" in s.plain_text and "already" in s.plain_text
                    for s in fake.sent), within=10)
    assert not list((stack.home / "workspaces").rglob("notes.txt"))


async def test_stop_while_the_request_is_still_being_filed_shows_it_cancelled(
    make_stack, fake, monkeypatch
):
    """A /stop that lands after the request is posted and filed but before its wait began
    (the window CI once hit): the request message still shows the stop, not "needed"."""
    from bots.approvals import ChatApprover

    filed = ChatApprover._file

    async def slow_file(self: Any, rec: Any, message_id: str) -> None:
        await filed(self, rec, message_id)
        await asyncio.sleep(2)  # the /stop arrives here, before the wait

    monkeypatch.setattr(ChatApprover, "_file", slow_file)
    stack, _ = await _asked(make_stack, fake)
    req = await _posted(stack, fake)
    fake.user_says(CHAT, "/stop", from_user=42, reply_to=req.message_id)
    await fake.wait_until(
        lambda: any(s.plain_text.startswith("⏹ Stopped") for s in fake.sent), within=10)
    await fake.wait_until(
        lambda: _request_message(fake).plain_text.startswith("⏹ write_file ("), within=10)
    assert not list((stack.home / "workspaces").rglob("notes.txt"))


async def test_status_while_the_request_is_still_being_filed_shows_the_wait(
    make_stack, fake, monkeypatch
):
    """/status asked as soon as the request is seen (it is still being filed) already
    says what the turn waits for."""
    from bots.approvals import ChatApprover

    filed = ChatApprover._file

    async def slow_file(self: Any, rec: Any, message_id: str) -> None:
        await filed(self, rec, message_id)
        await asyncio.sleep(2)

    monkeypatch.setattr(ChatApprover, "_file", slow_file)
    stack, _ = await _asked(make_stack, fake)
    req = await _posted(stack, fake)
    fake.user_says(CHAT, "/status", from_user=42, reply_to=req.message_id)
    await fake.wait_until(
        lambda: any(s.plain_text.startswith("session: ") for s in fake.sent), within=10)
    status = next(s for s in fake.sent if s.plain_text.startswith("session: "))
    assert "waiting for approval of write_file" in status.plain_text


async def test_telegram_buttons_approve_once_and_answer_each_click(make_stack, fake):
    stack, mid = await _asked(make_stack, fake)
    ws = binding_workspace(stack.home, stack.bindings[0])
    req = await _posted(stack, fake)
    buttons = [b["text"] for row in req.raw["reply_markup"]["inline_keyboard"] for b in row]
    assert any("Approve" in b for b in buttons) and any("Deny" in b for b in buttons)

    fake.user_clicks(CHAT, req.message_id, from_user=42, button="Approve")  # not an approver
    await fake.wait_until(lambda: len(fake.calls_to("answerCallbackQuery")) == 1, within=10)
    assert "Only 43 may approve" in fake.calls_to("answerCallbackQuery")[0].params["text"]
    assert not (ws / "notes.txt").exists()

    click = fake.user_clicks(CHAT, req.message_id, from_user=43, button="Approve")
    qid = fake.all_updates[click]["callback_query"]["id"]
    fake.user_clicks(CHAT, req.message_id, from_user=43, button="Approve")  # double click
    await fake.wait_until(lambda: finals(fake, "done"), within=10)
    await fake.wait_until(lambda: len(fake.calls_to("answerCallbackQuery")) == 3, within=10)
    answers = [c.params["text"] for c in fake.calls_to("answerCallbackQuery")[1:]]
    assert sum("approved by" in a and "already" not in a for a in answers) == 1
    assert sum("already" in a for a in answers) == 1
    # the same update delivered again (same callback query id): recorded once, no new answer
    fake.push_update({"callback_query": {**fake.all_updates[click]["callback_query"],
                                         "id": qid}})
    fake.user_says(CHAT, "/status", from_user=42, reply_to=req.message_id)
    await fake.wait_until(lambda: any("running: nothing" in s.plain_text for s in fake.sent),
                          within=10)
    assert len(fake.calls_to("answerCallbackQuery")) == 3
    assert (ws / "notes.txt").read_text() == "hello\nworld\n"
    assert len(finals(fake, "done")) == 1
    shown = _request_message(fake)
    assert shown.plain_text.startswith("✅ write_file (") and "(43)" in shown.plain_text
    assert "reply_markup" not in shown.raw  # the decided request has no buttons left

    # audit: requested, then decided by the approver, then the tool ran (same call id)
    (rec,) = await stack.connector.layer.approvals.for_session(
        f"telegram:123456:{CHAT}:{mid}")
    rows = [r for r in await stack.store.timeline.list(rec.session_id)
            if r.payload.get("call_id") == rec.call_id]
    kinds = [r.kind for r in rows]
    decided = rows[kinds.index("approval.decided")].payload
    assert (decided["by"], decided["outcome"], decided["decision"]) == (
        "User43 (43)", "approved", "allow")
    assert kinds.index("approval.requested") < kinds.index("approval.decided") < kinds.index(
        "tool.started")


async def test_a_turn_waiting_for_approval_does_not_hold_the_only_global_slot(make_stack, fake):
    def respond(request: ModelRequest) -> object:
        last = request.messages[-1]
        text = last.text or ""
        if last.role == "user" and "write the notes" in text:
            return ToolCall("write_file", WRITE)
        if last.role == "user" and "(id " in text:
            return "quick answer"
        return "done"

    provider = ScriptedProvider([respond], repeat_last=True)
    stack = make_stack(provider=provider, bindings=[_approval_binding()],
                       lanes={"global_cap": 1, "channel_cap": 1, "cli_cap": 1,
                              "wait_timeout_s": 30})
    await stack.start()
    fake.user_says(CHAT, "@geode_bot write the notes", from_user=42)
    req = await _posted(stack, fake)
    fake.user_says(CHAT, "@geode_bot something else", from_user=42)  # another thread
    await fake.wait_until(lambda: finals(fake, "quick answer"), within=10)
    assert not finals(fake, "done")  # the first turn still waits for its approver
    fake.user_says(CHAT, "/approve", from_user=43, reply_to=req.message_id)
    await fake.wait_until(lambda: finals(fake, "done"), within=10)


async def test_the_wait_for_a_person_does_not_use_up_the_turns_time_budget(make_stack, fake):
    stack, _ = await _asked(make_stack, fake, time_budget_s=1)
    req = await _posted(stack, fake)
    await asyncio.sleep(1.5)  # the approver takes longer than the whole turn may work
    fake.user_says(CHAT, "/approve", from_user=43, reply_to=req.message_id)
    await fake.wait_until(lambda: finals(fake, "done") or any(
        "could not finish" in s.plain_text for s in fake.sent), within=10)
    assert finals(fake, "done"), [s.plain_text for s in fake.sent][-3:]


async def test_run_bash_in_approve_runs_in_the_sandbox_after_approval(make_stack, fake):
    from geode.tools.builtin.bash import sandbox_available

    if not sandbox_available():
        import os

        import pytest

        if os.environ.get("CI") == "true":
            pytest.fail("the bubblewrap sandbox must be available under CI")
        pytest.skip("bubblewrap sandbox not available")
    cmd = {"command": "echo sandboxed > made.txt"}
    stack, _ = await _asked(make_stack, fake, cmd, tool="run_bash", text="make the file",
                            approve=["run_bash"])
    ws = binding_workspace(stack.home, stack.bindings[0])
    await fake.wait_until(lambda: any("Approval needed" in m.plain_text
                                      for m in fake.messages_in(CHAT, from_bot=True)), within=10)
    req = next(m for m in fake.messages_in(CHAT, from_bot=True)
               if "Approval needed" in m.plain_text)
    assert "run_bash in the sandbox" in req.plain_text
    assert "echo sandboxed > made.txt" in req.plain_text
    fake.user_says(CHAT, f"/approve {req.plain_text.split('(', 1)[1].split(')', 1)[0]}",
                   from_user=43)
    await fake.wait_until(lambda: finals(fake, "done"), within=20)
    assert (ws / "made.txt").read_text() == "sandboxed\n"


async def test_a_request_is_decided_only_from_its_own_channel(make_stack, fake):
    """The attacker's route round the approver list: the request's short id typed in another
    bound channel — by someone who approves there, and by the request's own approver — finds
    nothing ("No approval request … here"); the call still waits, then runs once when decided
    where it was asked."""
    other = CHAT + 1
    fake.add_chat(other)
    provider = ScriptedProvider([calls_tool("write_file", WRITE)], repeat_last=True)
    stack = make_stack(provider=provider, bindings=[
        _approval_binding(),
        binding(channel=other, allow_users=["43", "44"], approve=["write_file"],
                approvers=["44"]),
    ])
    await stack.start()
    fake.user_says(CHAT, "@geode_bot write the notes", from_user=42)
    short = (await _posted(stack, fake)).plain_text.split("(", 1)[1].split(")", 1)[0]

    for who in (44, 43):
        fake.user_says(other, f"/approve {short}", from_user=who)
    await fake.wait_until(lambda: len([
        m for m in fake.messages_in(other, from_bot=True)
        if f"No approval request {short} here" in m.plain_text]) == 2, within=10)
    assert not list((stack.home / "workspaces").rglob("notes.txt"))
    assert "Approval needed" in _request_message(fake).plain_text  # still waiting

    fake.user_says(CHAT, f"/approve {short}", from_user=43)
    await fake.wait_until(lambda: finals(fake, "done"), within=10)
    [written] = list((stack.home / "workspaces").rglob("notes.txt"))
    assert written.read_text() == WRITE["content"]
