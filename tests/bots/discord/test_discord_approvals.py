"""Approvals with Discord buttons (real discord.py against the wire-level fake, real store):
the request carries an action row Approve / Deny; a click arrives as a gateway
INTERACTION_CREATE (MESSAGE_COMPONENT), is acknowledged as a deferred update and decides
like ``/approve`` / ``/deny``; the clicker's answer is an ephemeral follow-up; the outcome
edit removes the buttons."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _discord_stack import (  # noqa: F401  (fixtures)
    DStack,
    dbinding,
    dfake,
    make_dstack,
    texts_in,
    wait_shown,
)
from sqlalchemy import select

from bots.events import InboundEvent, ReplyTarget
from bots.port import DeliveryError
from bots.store._tables import events_table, outbox_table
from bots.testing.discord import FakeDiscord, InteractionResponse
from bots.workspaces import binding_workspace
from geode.providers.scripted import ScriptedProvider
from tests.bots._harness import calls_tool, crash_at, tool_results

WRITE = {"path": "notes.txt", "content": "hello\nworld\n"}



def _binding(fake: FakeDiscord, **kw: Any) -> Any:
    kw.setdefault("approve", ["write_file"])
    kw.setdefault("approvers", [str(fake.bob)])  # type: ignore[attr-defined]
    return dbinding(fake, tools=["read_file"], **kw)


def _request(fake: FakeDiscord, where: int) -> dict[str, Any] | None:
    found = [m for m in fake.messages_in(where)
             if m["author"]["id"] == str(fake.bot_id) and "Approval needed" in m["content"]]
    return found[-1] if found else None


async def _posted(fake: FakeDiscord, where: int) -> dict[str, Any]:
    await fake.wait_for(lambda: where in fake.channels and _request(fake, where) is not None,
                        timeout=10)
    req = _request(fake, where)
    assert req is not None
    return req


async def _requested(make: Any, fake: FakeDiscord, *, inline: int | None = None,
                     store_url: str | None = None,
                     **binding_kw: Any) -> tuple[DStack, int, dict[str, Any]]:
    """A started stack whose model proposed write_file on a mention (``binding_kw``: more of
    the binding): the stack, the mention (or the ``inline`` channel it was made and bound
    in) and the request message posted there."""
    provider = ScriptedProvider([calls_tool("write_file", WRITE)], repeat_last=True)
    if inline is not None:
        binding_kw["channel"] = inline
    stack = make(provider=provider, bindings=[_binding(fake, **binding_kw)], store_url=store_url)
    await stack.start()
    root = await fake.user_says(inline or fake.channel_id, "write the notes", mention_bot=True)
    where = inline or root
    return stack, where, await _posted(fake, where)


def _answers(fake: FakeDiscord, iid: int) -> list[InteractionResponse]:
    return [r for r in fake.interaction_responses if r.interaction_id == iid]


def _followups(fake: FakeDiscord, iid: int) -> list[InteractionResponse]:
    return [r for r in _answers(fake, iid) if r.kind == "followup"]


async def _decided(stack: DStack, fake: FakeDiscord, iid: int, *,
                   within: float = 10.0) -> tuple[str, str, int]:
    """(status, decision, notices queued for it) of the click's recorded event, once the
    layer finished it (a notice is queued in the same transaction that finishes it)."""
    key = f"discord:{fake.bot_id}:interaction:{iid}"
    e, o = events_table.c, outbox_table.c
    async with asyncio.timeout(within):
        while True:
            async with stack.store.read() as conn:
                row = (await conn.execute(select(e.id, e.status, e.decision)
                                          .where(e.dedupe_key == key))).first()
                if row is not None and row.status not in ("received", "processing", "running"):
                    notices = len((await conn.execute(
                        select(o.id).where(o.event_id == row.id))).all())
                    return str(row.status), str(row.decision), notices
            await asyncio.sleep(0.02)


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None
    return str(request.getfixturevalue("pg_store_url"))


async def test_buttons_approve_once_a_stranger_changes_nothing_a_double_click_decides_once(
    store_url, make_dstack, dfake  # noqa: F811 (fixtures)
):
    stack, root, req = await _requested(make_dstack, dfake, store_url=store_url)
    ws = binding_workspace(stack.home, stack.bindings[0])
    bob = dfake.bob  # type: ignore[attr-defined]
    mid = int(req["id"])
    short = req["content"].split("(", 1)[1].split(")", 1)[0]
    assert [(b["label"], b["style"], b["custom_id"]) for b in dfake.buttons(mid)] == [
        ("Approve", 3, f"geode:approve:{short}"), ("Deny", 4, f"geode:deny:{short}")]

    # alice may talk to the bot but is not an approver: an ephemeral answer, nothing changes
    iid = await dfake.user_clicks(mid, "Approve")
    await dfake.wait_for(lambda: bool(_followups(dfake, iid)), timeout=10)
    (ack, answer) = _answers(dfake, iid)
    assert (ack.kind, ack.type) == ("callback", 6)  # deferred update, after the record
    assert answer.ephemeral and f"Only {bob} may approve" in (answer.content or "")
    # answered privately: no notice in the thread
    assert await _decided(stack, dfake, iid) == ("done", "command:approve", 0)
    assert not (ws / "notes.txt").exists()
    assert len(dfake.buttons(mid)) == 2
    assert dfake.messages_in(root)[-1]["id"] == str(mid)  # nothing posted in the thread
    assert (await stack.connector.layer.approvals.by_short_id(short)).status == "pending"

    # bob double-clicks: two interactions, one decision
    first, second = await asyncio.gather(dfake.user_clicks(mid, "Approve", user_id=bob),
                                         dfake.user_clicks(mid, "Approve", user_id=bob))
    await wait_shown(dfake, "done")
    await dfake.wait_for(lambda: bool(_followups(dfake, first) and _followups(dfake, second)),
                         timeout=10)
    texts = [(_followups(dfake, i)[0].content or "") for i in (first, second)]
    assert all(_followups(dfake, i)[0].ephemeral for i in (first, second))
    assert sum("approved by bob" in t and "already" not in t for t in texts) == 1, texts
    assert sum("already" in t for t in texts) == 1, texts
    for i in (first, second):
        assert await _decided(stack, dfake, i) == ("done", "command:approve", 0)
    assert (ws / "notes.txt").read_text() == "hello\nworld\n"
    assert texts_in(dfake, root).count("done") == 1
    # the request now shows the outcome, who decided, and no buttons
    shown = next(m for m in dfake.messages_in(root) if m["id"] == str(mid))
    assert shown["content"].startswith(f"✅ write_file ({short}): approved by bob ({bob})")
    assert shown["components"] == [] and dfake.buttons(mid) == []
    with pytest.raises(ValueError, match="no button"):
        await dfake.user_clicks(mid, "Approve", user_id=bob)

    # the first click's INTERACTION_CREATE delivered again: recorded once, decided once
    followups = len(dfake.interaction_responses)
    path = f"/interactions/{first}/"
    callbacks = sum(1 for _, p in dfake.requests if p.startswith(path))
    await dfake.redeliver_interaction(first)
    await dfake.wait_for(
        lambda: sum(1 for _, p in dfake.requests if p.startswith(path)) > callbacks, timeout=10)
    # it was recorded (or found recorded) before the acknowledgement was tried
    async with stack.store.read() as conn:
        clicks = (await conn.execute(select(events_table.c.dedupe_key).where(
            events_table.c.dedupe_key.like(f"discord:{dfake.bot_id}:interaction:%")))).all()
    assert len(clicks) == 3  # alice's, and bob's two: the redelivery added no event
    assert len(dfake.interaction_responses) == followups  # no new answer, no second ack
    session = f"discord:{dfake.bot_id}:{dfake.channel_id}:{root}"
    rows = await stack.store.timeline.list(session)
    decided = [r.payload for r in rows if r.kind == "approval.decided"]
    assert [(d["outcome"], d["by"]) for d in decided] == [("approved", f"bob ({bob})")]
    assert sum(1 for r in rows if r.kind == "tool.started") == 1


async def test_deny_button_has_no_effect_and_tells_the_model_who_denied(make_dstack, dfake):  # noqa: F811 (fixtures)
    # a channel where threads are refused: the request is answered in place (reply chain)
    inline = dfake.add_text_channel(dfake.guild_id, "no-threads", threads_allowed=False)
    stack, _, req = await _requested(make_dstack, dfake, inline=inline)
    provider = stack.provider
    bob = dfake.bob  # type: ignore[attr-defined]
    mid = int(req["id"])
    iid = await dfake.user_clicks(mid, "Deny", user_id=bob)
    await wait_shown(dfake, "done")
    assert not list((stack.home / "workspaces").rglob("notes.txt"))
    told = [t for t in tool_results(provider) if t.startswith("denied by approval: ")]
    assert told and f"denied by bob ({bob})" in told[-1]
    shown = next(m for m in dfake.messages_in(inline) if m["id"] == str(mid))
    assert shown["content"].startswith("🚫 write_file (") and dfake.buttons(mid) == []
    await dfake.wait_for(lambda: bool(_followups(dfake, iid)), timeout=10)
    assert "denied by bob" in (_followups(dfake, iid)[0].content or "")


async def test_no_click_in_time_expires_and_the_buttons_go(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack, root, req = await _requested(make_dstack, dfake, approval_timeout_s=1)
    provider = stack.provider
    mid = int(req["id"])
    await wait_shown(dfake, "done", timeout=15)
    assert not list((stack.home / "workspaces").rglob("notes.txt"))
    assert any("expired" in t for t in tool_results(provider))
    shown = next(m for m in dfake.messages_in(root) if m["id"] == str(mid))
    assert shown["content"].startswith("⌛ write_file (") and dfake.buttons(mid) == []


async def _waiting_again(stack: DStack, key: str) -> None:
    """Until the resumed turn of the thread waits for its approver again."""
    layer = stack.connector.layer if stack.connector is not None else None
    assert layer is not None
    async with asyncio.timeout(15):
        while not (key in layer.active and layer.active[key].waiting):
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("how", ["click after the restart", "/approve typed while down"])
async def test_killed_while_waiting_then_approved_runs_once_and_answers_once(
    make_dstack, dfake, how  # noqa: F811 (fixtures)
):
    """The buttons are plain components handled by ``on_interaction``, not a View that lived
    in the killed process's memory: the restarted process takes the click (or catches up the
    text command typed while it was down) and the resumed wait runs the call once."""
    stack, root, req = await _requested(make_dstack, dfake)
    ws = binding_workspace(stack.home, stack.bindings[0])
    bob = dfake.bob  # type: ignore[attr-defined]
    mid = int(req["id"])
    short = req["content"].split("(", 1)[1].split(")", 1)[0]
    approvals = stack.connector.layer.approvals
    async with asyncio.timeout(10):  # the row knows its message (posted, then recorded)
        while (await approvals.by_short_id(short)).message_id is None:
            await asyncio.sleep(0.05)
    await stack.crash()  # like kill -9: the turn dies while it waits
    if how == "/approve typed while down":
        await dfake.user_says(dfake.channel_id, f"/approve {short}", author_id=bob,
                              thread_id=root)
    await stack.start()
    session = f"discord:{dfake.bot_id}:{dfake.channel_id}:{root}"
    if how == "click after the restart":
        await _waiting_again(stack, session)
        iid = await dfake.user_clicks(mid, "Approve", user_id=bob)
        await dfake.wait_for(lambda: bool(_followups(dfake, iid)), timeout=10)
        assert _answers(dfake, iid)[0].type == 6
        answer = _followups(dfake, iid)[0]
        assert answer.ephemeral and f"write_file ({short}) approved by bob" in (
            answer.content or "")
    await wait_shown(dfake, "done", timeout=15)
    assert (ws / "notes.txt").read_text() == "hello\nworld\n"
    assert texts_in(dfake, root).count("done") == 1
    assert sum("Approval needed" in s.content for s in dfake.sent) == 1  # asked once
    await dfake.wait_for(lambda: dfake.buttons(mid) == [], timeout=10)
    shown = next(m for m in dfake.messages_in(root) if m["id"] == str(mid))
    assert shown["content"].startswith(f"✅ write_file ({short}): approved by bob ({bob})")
    receipts = await stack.store.receipts.list_for(session)
    assert [(r.tool, r.status) for r in receipts] == [("write_file", "done")]


async def test_a_kill_between_posting_the_request_and_recording_it_asks_once(
    make_dstack, dfake  # noqa: F811 (fixtures)
):
    """Killed after the request reached the thread but before its row recorded the message:
    the resumed turn reads the thread back, finds the request by its buttons' short id and
    records it; nothing is posted again, and a click on that one message runs the write
    once and the turn answers once."""
    hit, fault = crash_at("approval_sent_before_record")
    provider = ScriptedProvider([calls_tool("write_file", WRITE)], repeat_last=True)
    stack = make_dstack(provider=provider, bindings=[_binding(dfake)], fault=fault)
    await stack.start()
    root = await dfake.user_says(dfake.channel_id, "write the notes", mention_bot=True)
    await asyncio.wait_for(hit.wait(), 10)
    req = await _posted(dfake, root)
    short = req["content"].split("(", 1)[1].split(")", 1)[0]
    approvals = stack.connector.layer.approvals
    rec = await approvals.by_short_id(short)
    assert rec.pending and rec.message_id is None  # posted, never recorded
    await stack.crash()

    stack.fault = None
    await stack.start()
    session = f"discord:{dfake.bot_id}:{dfake.channel_id}:{root}"
    await _waiting_again(stack, session)
    approvals = stack.connector.layer.approvals
    assert (await approvals.by_short_id(short)).message_id == req["id"]  # found, recorded
    assert sum("Approval needed" in s.content for s in dfake.sent) == 1
    bob = dfake.bob  # type: ignore[attr-defined]
    iid = await dfake.user_clicks(int(req["id"]), "Approve", user_id=bob)
    await dfake.wait_for(lambda: bool(_followups(dfake, iid)), timeout=10)
    await wait_shown(dfake, "done", timeout=15)
    ws = binding_workspace(stack.home, stack.bindings[0])
    assert (ws / "notes.txt").read_text() == "hello\nworld\n"
    assert texts_in(dfake, root).count("done") == 1
    assert sum("Approval needed" in s.content for s in dfake.sent) == 1  # asked once
    receipts = await stack.store.receipts.list_for(session)
    assert [(r.tool, r.status) for r in receipts] == [("write_file", "done")]
    await dfake.wait_for(lambda: dfake.buttons(int(req["id"])) == [], timeout=10)


async def test_a_stopped_connector_sends_nothing(make_dstack, dfake):  # noqa: F811 (fixtures)
    """An edit still running as the connector stops (the cancelled request's outcome, shielded)
    is refused: discord.py's endpoints point at Discord's own again by then."""
    stack = make_dstack()
    connector = await stack.start()
    await stack.stop()
    target = ReplyTarget(channel=str(dfake.channel_id), thread_root="1")
    with pytest.raises(DeliveryError):
        await connector.edit(target, "1", connector.render("outcome")[0])


async def test_a_click_that_is_not_an_approval_records_nothing(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack = make_dstack()
    await stack.start()
    row = [{"type": 1, "components": [
        {"type": 2, "style": 1, "label": "Other", "custom_id": "someone:else:1"},
        {"type": 2, "style": 3, "label": "Approve", "custom_id": "geode:approve:ABCDEF"}]}]
    foreign = await dfake._create_bot_message(dfake.channel_id, {"content": "x",
                                                                 "components": row}, [])
    elsewhere = await dfake._create_bot_message(dfake.other_channel, {  # type: ignore[attr-defined]
        "content": "y", "components": row}, [])
    not_ours = await dfake.user_clicks(int(foreign["id"]), "Other")
    unbound = await dfake.user_clicks(int(elsewhere["id"]), "Approve")
    await dfake.wait_for(lambda: bool(_answers(dfake, not_ours) and _answers(dfake, unbound)),
                         timeout=10)
    for iid, says in ((not_ours, "not one GEODE understands"), (unbound, "not bound")):
        (answer,) = _answers(dfake, iid)
        assert (answer.kind, answer.type, answer.ephemeral) == ("callback", 4, True)
        assert says in (answer.content or "")
    async with stack.store.read() as conn:
        assert (await conn.execute(select(events_table.c.id).where(
            events_table.c.dedupe_key.like("%:interaction:%")))).all() == []


async def test_a_click_answered_too_late_for_its_interaction_raises_for_the_thread_notice(
    make_dstack, dfake  # noqa: F811 (fixtures)
):
    """The interaction token lives 15 minutes: a click decided later (say, caught up after
    downtime) cannot be answered ephemerally, and answer_action says so, so that the layer
    answers in the thread instead."""
    stack = make_dstack()
    connector = await stack.start()
    late = InboundEvent(
        platform="discord", workspace=connector.bot_id, channel=str(dfake.channel_id),
        thread_root="1", message_id="1", sender=str(dfake.user_id), dedupe_key="k",
        text="/approve ABCDEF", extra={"action": "button", "answer": "private",
                                       "component": {"token": "t", "expires": 1.0}})
    requests = len(dfake.requests)
    with pytest.raises(DeliveryError):
        await connector.answer_action(late, "Only 1 may approve or deny this.")
    assert len(dfake.requests) == requests  # nothing was tried
