"""Approvals on Slack with Block Kit buttons, through the real daemon, store, slack-bolt and
slack_sdk against FakeSlack, over Socket Mode (``interactive`` envelopes) and the signed HTTP
endpoint (``payload=<json>`` form POSTs): a write_file waits for a click of an approver; a
non-approver's click changes nothing and gets an ephemeral answer (the thread none); a deny
or the expiry denies it and the model is told why; a double click or a redelivered click
decides once; after a crash the request still waits: a click after the restart (one made
while the daemon was down fails visibly, Slack never delivers it) or an /approve reply written
while it was down (caught up) runs the write once and the turn answers once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slack_helpers import (
    ALICE,
    BOB,
    CH,
    SlackStack,
    bot_messages,
    mention,
    quiescent,
    sid,
    slack_binding,
    visible,
)

from bots.slack._actions import APPROVE_ACTION, DENY_ACTION, approval_blocks, convert_action
from bots.testing.slack import FakeSlack
from bots.workspaces import binding_workspace
from geode.providers.scripted import ScriptedProvider
from tests.bots._harness import calls_tool, crash_at, tool_results
from tests.bots.conftest import store_url_for

WRITE = {"path": "notes.txt", "content": "hello\nworld\n"}
ONLY_BOB = f"Only {BOB} may approve or deny this."


proposes_write = calls_tool("write_file", WRITE)


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as srv:
        srv.add_channel(CH)
        srv.add_user(ALICE, name="alice")
        srv.add_user(BOB, name="bob")
        yield srv


async def start(stacks: list[SlackStack], home: Path, fake: FakeSlack, mode: str,
                store_url: str | None = None, **binding: Any) -> SlackStack:
    binding.setdefault("approve", ["write_file"])
    binding.setdefault("approvers", [BOB])
    stack = SlackStack(home=home, fake=fake, mode=mode, store_url=store_url,
                       provider=ScriptedProvider([proposes_write], repeat_last=True),
                       bindings=[slack_binding(tools=["read_file"], **binding)])
    stacks.append(stack)
    await stack.start()
    return stack


def request_message(fake: FakeSlack, root: str) -> dict[str, Any] | None:
    """The approval request in the thread (the bot's message with buttons), once posted."""
    found = [m for m in bot_messages(fake, CH, thread=root)
             if any(b.get("type") == "actions" for b in m.get("blocks") or [])]
    return found[-1] if found else None


async def posted(fake: FakeSlack, root: str) -> dict[str, Any]:
    await fake.wait_until(lambda: request_message(fake, root) is not None, within=10)
    msg = request_message(fake, root)
    assert msg is not None
    return msg


def now(fake: FakeSlack, msg: dict[str, Any]) -> dict[str, Any]:
    """A message as it is now (after its edits)."""
    return next(m for m in fake.messages_in(CH, thread_ts=msg["thread_ts"])
                if m["ts"] == msg["ts"])


def buttons(msg: dict[str, Any]) -> list[dict[str, Any]]:
    return [el for b in msg.get("blocks") or [] if b["type"] == "actions"
            for el in b["elements"]]


def ephemerals_to(fake: FakeSlack, user: str) -> list[str]:
    return [e["text"] for e in fake.ephemerals if e["user"] == user]


async def timeline(stack: SlackStack, root: str) -> list[Any]:
    (rec,) = await stack.layer.approvals.for_session(sid(root))
    return [r for r in await stack.store.timeline.list(rec.session_id)
            if r.payload.get("call_id") == rec.call_id]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, home: Path) -> str:
    if request.param == "sqlite":
        return store_url_for(home)
    return str(request.getfixturevalue("pg_store_url"))


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_an_approvers_click_writes_once_a_strangers_changes_nothing(
    stacks, home, fake, mode, store_url
):
    stack = await start(stacks, home, fake, mode, store_url)
    ws = binding_workspace(stack.home, stack.bindings[0])
    root = await fake.user_posts(CH, mention("write the notes"), user=ALICE)
    req = await posted(fake, root)
    assert req["thread_ts"] == root
    assert "Approval needed" in req["text"] and "+hello" in req["text"]  # the fallback text
    shown = "\n".join(b["text"]["text"] for b in req["blocks"] if b["type"] == "section")
    assert "write_file notes.txt" in shown and "+world" in shown and f"Approvers: {BOB}" in shown
    approve, deny = buttons(req)
    short = approve["value"]
    assert (approve["text"]["text"], approve["style"], approve["action_id"]) == (
        "Approve", "primary", APPROVE_ACTION)
    assert (deny["text"]["text"], deny["style"], deny["action_id"], deny["value"]) == (
        "Deny", "danger", DENY_ACTION, short)
    assert f"({short})" in shown

    # a click from someone who may not approve: nothing changes, they are told who may
    await fake.click(CH, req["ts"], ALICE, "Approve")
    await fake.wait_until(lambda: ephemerals_to(fake, ALICE), within=10)
    assert ephemerals_to(fake, ALICE) == [ONLY_BOB]
    assert fake.ephemerals[0]["thread_ts"] == root
    (rec,) = await stack.layer.approvals.for_session(sid(root))
    assert rec.pending and not (ws / "notes.txt").exists()
    assert buttons(now(fake, req)) == [approve, deny]  # still waiting, still clickable

    # the approver double-clicks: two interactions built before either was handled
    first = fake.action_payload(CH, req["ts"], BOB, "Approve")
    second = fake.action_payload(CH, req["ts"], BOB, "Approve")
    delivery = await fake.send_action(first)
    await fake.send_action(second)
    await fake.wait_until(lambda: visible(fake, "done"), within=10)
    await fake.wait_until(lambda: len(ephemerals_to(fake, BOB)) == 2, within=10)
    answers = ephemerals_to(fake, BOB)
    assert sum("approved by bob (U0BOB)" in a and "already" not in a for a in answers) == 1
    assert sum("already" in a for a in answers) == 1
    assert (ws / "notes.txt").read_text() == "hello\nworld\n"

    # the same interaction delivered again (unacked in time / retried POST): recorded once
    before = await stack.event_count()
    if mode == "socket":
        assert isinstance(delivery, str)
        await fake.redeliver(delivery)
        await fake.wait_until(lambda: fake.acks.count(delivery) == 2, within=10)
    else:
        retried = await fake.send_action(first, retry_num=1)
        assert not isinstance(retried, str) and retried.status == 200
    await quiescent(stack)
    assert await stack.event_count() == before
    assert len(ephemerals_to(fake, BOB)) == 2

    assert len(visible(fake, "done")) == 1  # the turn answered once
    # the answers to the clicks went to the clickers alone: the thread has no notice of them
    texts = [m["text"] for m in bot_messages(fake, CH, thread=root)]
    assert not [t for t in texts if t.startswith("Only ") or "already" in t], texts
    kinds = [r.kind for r in await timeline(stack, root)]
    assert kinds.count("approval.decided") == 1 and kinds.count("tool.started") == 1
    assert kinds.index("approval.requested") < kinds.index("approval.decided") < kinds.index(
        "tool.started")
    # the request now shows the outcome and who decided, without buttons
    final = now(fake, req)
    assert final["text"].startswith(f"✅ write_file ({short}): approved by bob (U0BOB)")
    assert final["blocks"] == []
    with pytest.raises(LookupError):
        fake.action_payload(CH, req["ts"], BOB, "Approve")


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_a_deny_click_writes_nothing_and_tells_the_model_who(stacks, home, fake, mode):
    stack = await start(stacks, home, fake, mode)
    root = await fake.user_posts(CH, mention("write the notes"), user=ALICE)
    req = await posted(fake, root)
    await fake.click(CH, req["ts"], BOB, "Deny")
    await fake.wait_until(lambda: visible(fake, "done"), within=10)
    assert not list((stack.home / "workspaces").rglob("notes.txt"))
    told = [t for t in tool_results(stack.provider) if t.startswith("denied by approval: ")]
    assert told and "denied by bob (U0BOB);" in told[-1]
    final = now(fake, req)
    assert final["text"].startswith("🚫 write_file (")
    assert final["blocks"] == []
    assert ephemerals_to(fake, BOB) and "denied by bob" in ephemerals_to(fake, BOB)[0]


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_no_click_in_time_is_denied_as_expired_and_the_buttons_go(
    stacks, home, fake, mode
):
    stack = await start(stacks, home, fake, mode, approval_timeout_s=1)
    root = await fake.user_posts(CH, mention("write the notes"), user=ALICE)
    req = await posted(fake, root)
    assert buttons(req)
    await fake.wait_until(lambda: visible(fake, "done"), within=15)
    assert not list((stack.home / "workspaces").rglob("notes.txt"))
    assert any("expired" in t for t in tool_results(stack.provider))
    expired = [r for r in await timeline(stack, root) if r.kind == "approval.expired"]
    assert len(expired) == 1 and expired[0].payload["decision"] == "deny"
    final = now(fake, req)
    assert final["text"].startswith("⌛ write_file (")
    assert final["blocks"] == []
    with pytest.raises(LookupError):  # nothing left to click
        fake.action_payload(CH, req["ts"], BOB, "Approve")


async def test_an_interactive_post_with_a_bad_signature_is_refused_unrecorded(
    stacks, home, fake
):
    stack = await start(stacks, home, fake, "http")
    root = await fake.user_posts(CH, mention("write the notes"), user=ALICE)
    req = await posted(fake, root)
    before = await stack.event_count()  # both events of the post were recorded before their 200
    forged = await fake.send_action(fake.action_payload(CH, req["ts"], BOB, "Approve"),
                                    bad_signature=True)
    assert not isinstance(forged, str) and forged.status == 401
    assert await stack.event_count() == before
    (rec,) = await stack.layer.approvals.for_session(sid(root))
    assert rec.pending
    await fake.click(CH, req["ts"], BOB, "Approve")  # the genuine click still works
    await fake.wait_until(lambda: visible(fake, "done"), within=10)


def test_approval_blocks_fit_slack_limits_and_every_click_converts_or_is_dropped():
    text = "🔐 Approval needed (K7Q2XM): write_file\n" + "+line\n" * 2000
    blocks = approval_blocks(text, "K7Q2XM")
    sections = [b["text"]["text"] for b in blocks if b["type"] == "section"]
    assert all(0 < len(s) <= 3000 for s in sections) and len(blocks) <= 50
    assert blocks[-1]["type"] == "actions"

    payload = {
        "type": "block_actions", "user": {"id": BOB, "name": "bob"}, "team": {"id": "T1"},
        "trigger_id": "1.2.abc",
        "container": {"type": "message", "channel_id": CH, "message_ts": "1700000000.000200",
                      "thread_ts": "1700000000.000100"},
        "actions": [{"type": "button", "action_id": DENY_ACTION, "value": "K7Q2XM",
                     "action_ts": "1700000001.000000"}],
    }
    ev = convert_action(payload, team="T1")
    assert ev is not None
    assert (ev.text, ev.sender, ev.sender_name, ev.thread_root, ev.reply_to) == (
        "/deny K7Q2XM", BOB, "bob", "1700000000.000100", "1700000000.000200")
    assert ev.dedupe_key == "slack:T1:act:1.2.abc" and ev.extra["action"] == "button"
    assert not ev.starts_thread and ev.mentions_bot

    def variant(**kw: Any) -> dict[str, Any]:
        return {**payload, **kw}

    dropped = [
        None, [], "x", {}, {"type": "view_submission"}, variant(user="U1"), variant(user={}),
        variant(actions=[]), variant(actions="x"),
        variant(actions=[{"type": "button", "action_id": "other", "value": "K7Q2XM"}]),
        variant(actions=[{"type": "button", "action_id": APPROVE_ACTION, "value": "x y"}]),
        variant(actions=[{"type": "static_select", "action_id": APPROVE_ACTION,
                          "value": "K7Q2XM"}]),
        variant(container={"type": "message", "channel_id": CH, "message_ts": "nope"}),
        variant(container={"type": "view"}),
        variant(team={"id": "T2"}),  # another workspace's click
        variant(trigger_id=["not", "a", "string"]),
    ]
    for body in dropped:
        assert convert_action(body, team="T1") is None, body


def requests_posted(fake: FakeSlack) -> list[Any]:
    """Every approval request the bot posted (chat.postMessage with buttons)."""
    return [p for p in fake.posts if p.method == "chat.postMessage"
            and any(b.get("type") == "actions" for b in p.blocks or [])]


async def waiting_again(stack: SlackStack, root: str) -> None:
    """Until the resumed turn of thread ``root`` waits for its approver again."""
    async with asyncio.timeout(10):
        while not (sid(root) in stack.layer.active and stack.layer.active[sid(root)].waiting):
            await asyncio.sleep(0.05)


async def filed(stack: SlackStack, root: str) -> None:
    """Until the request's row records its message (posted, then recorded: a crash between
    the two is the case of the test_a_kill_between_posting_… test)."""
    async with asyncio.timeout(10):
        while not [r for r in await stack.layer.approvals.for_session(sid(root))
                   if r.message_id]:
            await asyncio.sleep(0.05)


async def one_effect_one_answer(stack: SlackStack, fake: FakeSlack, root: str,
                                req: dict[str, Any], *, by_name: str = "bob") -> None:
    await fake.wait_until(lambda: visible(fake, "done"), within=15)
    await quiescent(stack)
    ws = binding_workspace(stack.home, stack.bindings[0])
    assert (ws / "notes.txt").read_text() == "hello\nworld\n"
    assert len(visible(fake, "done")) == 1
    assert len(requests_posted(fake)) == 1  # the resumed wait posted no second request
    (rec,) = await stack.layer.approvals.for_session(sid(root))
    assert (rec.status, rec.decided_by, rec.decided_by_name) == ("approved", BOB, by_name)
    receipts = await stack.store.receipts.list_for(sid(root))
    assert [(r.tool, r.status) for r in receipts] == [("write_file", "done")]
    final = now(fake, req)
    assert final["text"].startswith("✅ write_file (") and final["blocks"] == []


@pytest.mark.parametrize(("mode", "store_url"), [("socket", "sqlite"), ("http", "postgresql")],
                         indirect=["store_url"])
async def test_a_click_after_a_crash_and_restart_runs_the_write_once(
    stacks, home, fake, mode, store_url
):
    stack = await start(stacks, home, fake, mode, store_url)
    root = await fake.user_posts(CH, mention("write the notes"), user=ALICE)
    req = await posted(fake, root)
    await filed(stack, root)
    await stack.crash()  # like kill -9 while the request waits: nothing is finished
    assert buttons(now(fake, req))  # the request still waits (a restart does not end it)

    await stack.start()
    await waiting_again(stack, root)
    await fake.click(CH, req["ts"], BOB, "Approve")
    await one_effect_one_answer(stack, fake, root, req)
    assert len(ephemerals_to(fake, BOB)) == 1


async def test_a_kill_between_posting_the_request_and_recording_it_asks_once(
    stacks, home, fake
):
    """Killed after the request reached the thread but before its row recorded the message:
    the resumed turn reads the thread back, finds the request by its short id and records
    it; nothing is posted again, and a click on that one message runs the write once."""
    hit, fault = crash_at("approval_sent_before_record")
    stack = SlackStack(home=home, fake=fake, mode="socket", fault=fault,
                       provider=ScriptedProvider([proposes_write], repeat_last=True),
                       bindings=[slack_binding(tools=["read_file"], approve=["write_file"],
                                               approvers=[BOB])])
    stacks.append(stack)
    await stack.start()
    root = await fake.user_posts(CH, mention("write the notes"), user=ALICE)
    await asyncio.wait_for(hit.wait(), 10)
    req = await posted(fake, root)
    (rec,) = await stack.layer.approvals.for_session(sid(root))
    assert rec.pending and rec.message_id is None  # posted, never recorded
    await stack.crash()

    stack.fault = None
    await stack.start()
    await waiting_again(stack, root)
    await filed(stack, root)
    (rec,) = await stack.layer.approvals.for_session(sid(root))
    assert rec.message_id == req["ts"]  # the message found in the thread
    assert len(requests_posted(fake)) == 1
    await fake.click(CH, req["ts"], BOB, "Approve")
    await one_effect_one_answer(stack, fake, root, req)


async def test_a_click_while_the_daemon_is_down_fails_visibly_and_the_request_still_waits(
    stacks, home, fake, store_url
):
    stack = await start(stacks, home, fake, "socket", store_url)
    root = await fake.user_posts(CH, mention("write the notes"), user=ALICE)
    req = await posted(fake, root)
    await filed(stack, root)
    await stack.crash()
    # nothing listens: Slack shows the clicker an error and never delivers that click
    with pytest.raises(ConnectionError):
        await fake.click(CH, req["ts"], BOB, "Approve")

    await stack.start()
    await waiting_again(stack, root)
    assert buttons(now(fake, req))  # the same request, still clickable: a double click now
    first = fake.action_payload(CH, req["ts"], BOB, "Approve")
    second = fake.action_payload(CH, req["ts"], BOB, "Approve")
    await fake.send_action(first)
    await fake.send_action(second)
    await one_effect_one_answer(stack, fake, root, req)
    await fake.wait_until(lambda: len(ephemerals_to(fake, BOB)) == 2, within=10)
    answers = ephemerals_to(fake, BOB)
    assert sum("approved by bob (U0BOB)" in a and "already" not in a for a in answers) == 1
    assert sum("already" in a for a in answers) == 1


async def test_an_approve_reply_written_while_the_daemon_is_down_is_caught_up_once(
    stacks, home, fake
):
    stack = await start(stacks, home, fake, "socket")
    root = await fake.user_posts(CH, mention("write the notes"), user=ALICE)
    req = await posted(fake, root)
    await filed(stack, root)
    await stack.crash()
    # the text fallback, posted in the thread while nobody listened: found by catch-up
    await fake.user_posts(CH, "/approve", user=BOB, thread_ts=root, deliver=False)

    await stack.start()
    # (a message read from history carries no user_profile here: the id alone names him)
    await one_effect_one_answer(stack, fake, root, req, by_name="")


_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True), st.text(max_size=20))
_ts = st.one_of(st.sampled_from(["1700000000.000100", "abc", "", "1.2.3"]), _scalar)
_action = st.one_of(_scalar, st.fixed_dictionaries({}, optional={
    "type": st.one_of(st.sampled_from(["button", "static_select"]), _scalar),
    "action_id": st.one_of(st.sampled_from([APPROVE_ACTION, DENY_ACTION, "other"]), _scalar),
    "value": st.one_of(st.sampled_from(["K7Q2XM", "x y", "", "A" * 3000]), _scalar),
    "action_ts": _ts,
}))
_click = st.fixed_dictionaries({"type": st.sampled_from(["block_actions", "block_actions",
                                                          "view_submission", "shortcut"])},
                               optional={
    "user": st.one_of(_scalar, st.fixed_dictionaries({}, optional={
        "id": st.one_of(st.sampled_from([ALICE, BOB, ""]), _scalar),
        "name": _scalar, "username": _scalar})),
    "team": st.one_of(_scalar, st.fixed_dictionaries({}, optional={
        "id": st.one_of(st.sampled_from(["T0FAKE", "T0OTHER"]), _scalar)})),
    "channel": st.one_of(_scalar, st.fixed_dictionaries({}, optional={
        "id": st.one_of(st.sampled_from([CH, "x" * 300]), _scalar)})),
    "container": st.one_of(_scalar, st.fixed_dictionaries({}, optional={
        "channel_id": st.one_of(st.just(CH), _scalar), "message_ts": _ts, "thread_ts": _ts})),
    "message": st.one_of(_scalar, st.fixed_dictionaries({}, optional={
        "ts": _ts, "thread_ts": _ts})),
    "trigger_id": st.one_of(st.text(max_size=300), _scalar),
    "actions": st.one_of(_scalar, st.lists(_action, max_size=3)),
})


def _clicks() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    @settings(max_examples=40, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(_click)
    def collect(c: dict[str, Any]) -> None:
        out.append(c)

    collect()
    return out


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_fuzzed_interactive_payloads_are_acked_and_the_next_click_still_decides(
    stacks, home, fake, mode
):
    clicks = _clicks()
    for body in clicks:  # the converter is total
        ev = convert_action(body, team="T0FAKE")
        assert ev is None or ev.text.split()[0] in ("/approve", "/deny")
    stack = await start(stacks, home, fake, mode)
    root = await fake.user_posts(CH, mention("write the notes"), user=ALICE)
    req = await posted(fake, root)
    for body in clicks:  # through bolt's real path, as Slack would send them
        result = await fake.send_action(body)
        if mode == "http":  # 400: bolt could not even build its request (not recorded)
            assert not isinstance(result, str) and result.status in (200, 400), result
    if mode == "socket":
        await fake.wait_until(lambda: not fake.unacked, within=10)
    (rec,) = await stack.layer.approvals.for_session(sid(root))
    assert rec.pending  # no fuzzed payload decided anything
    await fake.click(CH, req["ts"], BOB, "Approve")
    await fake.wait_until(lambda: visible(fake, "done"), within=10)
    ws = binding_workspace(stack.home, stack.bindings[0])
    assert (ws / "notes.txt").read_text() == "hello\nworld\n"


async def test_geode_approve_slash_command_decides_like_the_button(stacks, home, fake):
    stack = await start(stacks, home, fake, "socket")
    root = await fake.user_posts(CH, mention("write the notes"), user=ALICE)
    req = await posted(fake, root)
    short = buttons(req)[0]["value"]
    # Slack's client takes a leading "/" for a command: /geode carries approve / deny
    await fake.slash_command("/geode", "approve", CH, ALICE)  # the one waiting; not hers
    # told her alone (ephemeral), never in the thread (issue #30: a flood lever)
    await fake.wait_until(lambda: ephemerals_to(fake, ALICE) == [ONLY_BOB], within=10)
    assert not [m for m in bot_messages(fake, CH, thread=root) if m["text"] == ONLY_BOB]
    (rec,) = await stack.layer.approvals.for_session(sid(root))
    assert rec.pending
    envelope = await fake.slash_command("/geode", f"approve {short.lower()}", CH, BOB)
    await fake.wait_until(lambda: visible(fake, "done"), within=10)
    assert fake.ack_payloads[str(envelope)]["text"] == "`/geode approve`: answering in the thread."
    ws = binding_workspace(stack.home, stack.bindings[0])
    assert (ws / "notes.txt").read_text() == "hello\nworld\n"
    (rec,) = await stack.layer.approvals.for_session(sid(root))
    assert (rec.status, rec.decided_by, rec.decided_by_name) == ("approved", BOB, "bob")
    assert now(fake, req)["blocks"] == []


def test_slash_approve_takes_the_id_then_an_optional_thread():
    from bots.slack._convert import command_event, parse_slash

    def slash(text: str) -> Any:
        cmd = parse_slash({"channel_id": CH, "user_id": BOB, "text": text, "trigger_id": "t1"})
        assert cmd is not None
        return cmd

    cmd = slash("approve k7q2xm https://x.slack.com/archives/C1/p1700000000000100")
    assert (cmd.name, cmd.arg, cmd.thread) == ("approve", "K7Q2XM", "1700000000.000100")
    assert command_event(cmd, team="T", thread_root="1.2").text == "/approve K7Q2XM"
    cmd = slash("deny")
    assert (cmd.name, cmd.arg, cmd.thread) == ("deny", "", None)
    assert command_event(cmd, team="T", thread_root="1.2").text == "/deny"
    cmd = slash("deny 1700000000.000100")  # a thread, not an id
    assert (cmd.arg, cmd.thread) == ("", "1700000000.000100")
    cmd = slash("status K7Q2XM")  # only approve / deny take an id
    assert (cmd.arg, command_event(cmd, team="T", thread_root="1.2").text) == ("", "/status")
