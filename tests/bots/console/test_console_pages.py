"""The console's pages: what each shows, as HTML and as JSON, over a real store."""

from __future__ import annotations

import time
from typing import Any

import pytest

from bots.events import InboundEvent
from bots.store import ThreadSessions
from geode.messages import Message
from geode.store.usage import UsageRecord
from tests.bots.console.conftest import ALICE, OPERATOR, Console, open_request

pytestmark = pytest.mark.timeout(60)


async def _thread(console: Console, channel: str, root: str, title: str) -> str:
    event = InboundEvent(platform="telegram", workspace="", channel=channel, thread_root=root,
                         message_id=root, sender="5", dedupe_key=f"tg:{channel}:{root}")
    state = await ThreadSessions(store=console.store).engage(event)
    await console.store.sessions.create(state.session_id, mode="daemon", model="m",
                                        title=title, if_missing=True)
    return state.session_id


async def test_threads_are_listed_per_binding_and_searchable(console: Console) -> None:
    await _thread(console, "-1001", "10", "deploy the docs")
    await _thread(console, "-1001", "11", "weekly report")
    await _thread(console, "-1002", "12", "bob's thread")
    op = await console.sign_in(OPERATOR)
    status, page = await op.json("/threads")
    assert status == 200
    got = {g["binding"]: sorted(t["title"] for t in g["threads"]) for g in page["groups"]}
    assert got == {"telegram:-1001": ["deploy the docs", "weekly report"],
                   "telegram:-1002": ["bob's thread"]}
    status, page = await op.json("/threads?q=DOCS")
    assert [t["title"] for g in page["groups"] for t in g["threads"]] == ["deploy the docs"]
    status, page = await op.json("/threads?binding=telegram:-1002")
    assert [g["binding"] for g in page["groups"]] == ["telegram:-1002"]
    html = await (await op.client.get("/threads")).text()
    assert "deploy the docs" in html and "/threads/telegram%3A%3A-1001%3A10" in html


async def test_a_thread_page_has_its_transcript_timeline_and_requests(
        console: Console) -> None:
    sid = await _thread(console, "-1001", "10", "notes")
    await console.store.checkpointer(sid).save(
        messages=[Message.user("write the notes <b>now</b>"), Message.assistant("Done.")],
        state={}, status="active", turn_id="t1")
    await console.store.timeline.append(session_id=sid, turn_id="t1", kind="turn.started",
                                        payload={"sender": "5"})
    await open_request(console.store, channel="-1001", approvers=["42"], session=sid)
    alice = await console.sign_in(ALICE)
    status, page = await alice.json(f"/threads/{sid}")
    assert status == 200
    assert [(e["role"], e["text"]) for e in page["transcript"]] == [
        ("user", "write the notes <b>now</b>"), ("assistant", "Done.")]
    assert "turn.started" in [r["kind"] for r in page["timeline"]]
    assert [(a["tool"], a["status"], a["may_decide"]) for a in page["approvals"]] == [
        ("write_file", "pending", True)]
    html = await (await alice.client.get(f"/threads/{sid}")).text()
    # the model's and the users' words are escaped, never markup
    assert "&lt;b&gt;now&lt;/b&gt;" in html and "<b>now</b>" not in html


async def test_the_approvals_page_shows_the_whole_call_with_its_buttons(
        console: Console) -> None:
    rec = await open_request(console.store, channel="-1001", approvers=["42"])
    alice = await console.sign_in(ALICE)
    html = await (await alice.client.get("/approvals")).text()
    assert rec.short_id in html and "write notes.txt (2 bytes)" in html
    assert f'action="/approvals/{rec.id}"' in html
    assert 'value="approve"' in html and 'value="deny"' in html


async def test_overview_counts_today_and_spend_against_the_caps(console: Console) -> None:
    console.settings.bindings[0].max_tokens_per_day = 1000
    console.settings.budgets.max_usd_per_day = 5.0
    now = int(time.time() * 1000)
    await console.store.usage.record(UsageRecord(
        session_id="s", binding="telegram:-1001", platform="telegram", user="5", model="m",
        input_tokens=100, output_tokens=20, cost_usd=0.5), at_ms=now)
    await console.store.usage.record(UsageRecord(
        session_id="s2", binding="telegram:-1002", platform="telegram", user="77", model="m",
        input_tokens=7, output_tokens=3), at_ms=now)
    await open_request(console.store, channel="-1001", approvers=["42"])
    op = await console.sign_in(OPERATOR)
    status, page = await op.json("/")
    assert status == 200 and page["operator"] is True
    assert page["today"]["tokens"] == 130 and page["pending_approvals"] == 1
    caps = {(c["where"], c["cap"]): c["used"] for c in page["caps"]}
    assert caps[("[budgets] (daemon-wide)", "max_usd_per_day")] == pytest.approx(0.5)
    assert caps[("binding telegram:-1001", "max_tokens_per_day")] == 120
    # an approver sees its own binding only, and no daemon-wide figures
    alice = await console.sign_in(ALICE)
    status, page = await alice.json("/")
    assert page["today"] is None and page["readiness"] is None
    assert [(b["key"], b["today"]["tokens"]) for b in page["bindings"]] == [
        ("telegram:-1001", 120)]


async def test_usage_is_a_server_rendered_svg_chart(console: Console) -> None:
    now = int(time.time() * 1000)
    for binding, tokens in (("telegram:-1001", 300), ("telegram:-1002", 50)):
        await console.store.usage.record(UsageRecord(
            session_id="s", binding=binding, platform="telegram", user="5", model="m",
            input_tokens=tokens, output_tokens=0), at_ms=now)
    op = await console.sign_in(OPERATOR)
    html = await (await op.client.get("/usage?by=binding")).text()
    assert "<svg" in html and html.count("<rect") == 2 and "style=" not in html
    status, page = await op.json("/usage?by=model")
    assert status == 200 and [(r["key"], r["tokens"]) for r in page["rows"]] == [("m", 350)]
    alice = await console.sign_in(ALICE)
    status, page = await alice.json("/usage?by=binding")
    assert [(r["key"], r["tokens"]) for r in page["rows"]] == [("telegram:-1001", 300)]
    status, page = await alice.json("/usage")
    assert [r["tokens"] for r in page["rows"]] == [300]
    status, _ = await alice.json("/usage?by=user")  # spans every binding: operators only
    assert status == 400


async def test_the_static_files_are_served_and_the_script_is_ours(console: Console) -> None:
    r = await console.client.get("/static/console.js")
    body: Any = await r.text()
    assert r.status == 200 and "import" not in body and "http" not in body


async def test_usage_lists_the_bindings_with_where_each_comes_from(console: Console) -> None:
    from bots.store import StoredBindings
    from geode.settings import BindingSettings

    await StoredBindings(store=console.store).add(BindingSettings(
        platform="telegram", channel="-1003", approvers=["42"]))
    alice = await console.sign_in(ALICE)
    status, page = await alice.json("/usage")
    assert status == 200
    assert [(b["key"], b["source"]) for b in page["bindings"]] == [
        ("telegram:-1001", "config.toml"), ("telegram:-1003", "geode bindings add")]


async def test_a_thread_page_lists_its_effect_receipts(console: Console) -> None:
    sid = await _thread(console, "-1001", "10", "notes")
    await console.store.receipts.intend(session_id=sid, turn_id="t1", call_id="c1",
                                        tool="write_file", args_hash="h")
    alice = await console.sign_in(ALICE)
    status, page = await alice.json(f"/threads/{sid}")
    assert status == 200 and [(r["tool"], r["call_id"]) for r in page["receipts"]] == [
        ("write_file", "c1")]


async def test_overview_lists_the_replies_that_failed_today(console: Console) -> None:
    from datetime import UTC, datetime, timedelta

    from bots.store._tables import outbox_table

    now = datetime.now(UTC)
    async with console.store.write() as conn:
        for i, (channel, status, at) in enumerate((
                ("-1001", "failed", now), ("-1002", "uncertain", now),
                ("-1001", "sent", now), ("-1001", "failed", now - timedelta(days=2)))):
            await conn.execute(outbox_table.insert().values(
                session_key=f"s{i}", turn_key="t", event_id=None, kind="turn",
                platform="telegram", workspace="", channel=channel, thread_root="10",
                target={}, status=status, message_ids=[], chunks=[],
                error=f"Forbidden {i}", created_at=at, updated_at=at))
    op = await console.sign_in(OPERATOR)
    status, page = await op.json("/")
    assert status == 200
    assert sorted(e["error"] for e in page["recent_errors"]) == ["Forbidden 0", "Forbidden 1"]
    alice = await console.sign_in(ALICE)
    status, page = await alice.json("/")
    assert [e["error"] for e in page["recent_errors"]] == ["Forbidden 0"]
    assert "Forbidden 0" in await (await alice.client.get("/")).text()


async def _queued(console: Console, channel: str, root: str) -> int:
    from bots.store._tables import events_table, outbox_table
    from bots.store.queue import _ACCEPTED

    async with console.store.write() as conn:
        result = await conn.execute(events_table.insert().values(
            dedupe_key=f"q:{channel}:{root}", platform="telegram", workspace="",
            channel=channel, thread_root=root, message_id="11", sender="5", payload={},
            status="running", decision=_ACCEPTED, session_id=None, owner=""))
        event_id = int(result.inserted_primary_key[0])
        await conn.execute(outbox_table.insert().values(
            session_key=f"telegram::{channel}:{root}", turn_key=f"ev{event_id}",
            event_id=event_id, kind="turn", platform="telegram", workspace="",
            channel=channel, thread_root=root, target={}, status="pending", message_ids=[],
            chunks=[], error=""))
    return event_id


async def test_a_queued_message_is_stopped_from_its_thread_page(console: Console) -> None:
    from bots.store import ChannelQueue

    sid = await _thread(console, "-1001", "10", "notes")
    other = await _thread(console, "-1002", "12", "bob's")
    mine, theirs = await _queued(console, "-1001", "10"), await _queued(console, "-1002", "12")
    alice = await console.sign_in(ALICE)
    status, page = await alice.json(f"/threads/{sid}")
    assert status == 200
    assert [q["id"] for q in page["queued"]] == [mine] and page["queue_position"] == 1
    token = await alice.csrf()
    # another thread's message through this thread, and another binding's thread: nothing
    r = await alice.client.post(f"/threads/{sid}/drop/{theirs}", data={"csrf": token},
                                headers={"Accept": "application/json"})
    assert r.status == 409
    r = await alice.client.post(f"/threads/{other}/drop/{theirs}", data={"csrf": token})
    assert r.status == 404
    r = await alice.client.post(f"/threads/{sid}/drop/{mine}", data={"csrf": token},
                                allow_redirects=False)
    assert r.status == 303
    assert [q.id for q in await ChannelQueue(store=console.store).list()] == [theirs]
    audit = [(r.payload["event_id"], r.payload["applied"])
             for r in await console.store.timeline.list(sid) if r.kind == "console.drop"]
    assert audit == [(theirs, False), (mine, True)]


async def test_a_thread_page_lists_the_files_sent_into_it(console: Console) -> None:
    from bots.store._tables import outbox_table

    sid = await _thread(console, "-1001", "10", "notes")
    async with console.store.write() as conn:
        await conn.execute(outbox_table.insert().values(
            session_key=sid, turn_key="file:t1:c1", event_id=None, kind="file",
            platform="telegram", workspace="", channel="-1001", thread_root="10", target={},
            status="sent", message_ids=["99"], error="",
            chunks=[{"formatted": "", "fallback": "",
                     "file": {"name": "report.pdf", "size": 1234, "sha256": "x"}}]))
    alice = await console.sign_in(ALICE)
    status, page = await alice.json(f"/threads/{sid}")
    assert status == 200
    assert [(f["name"], f["size"], f["status"]) for f in page["files_out"]] == [
        ("report.pdf", 1234, "sent")]


async def test_a_thread_s_session_is_forked_from_its_page(console: Console) -> None:
    """Fork on the thread page does what `geode sessions fork` does: a new session after the
    chosen turn, its parent recorded, the original unchanged; audited with who asked; a
    thread of another binding and a turn it does not have are refused."""
    sid = await _thread(console, "-1001", "10", "notes")
    cp = console.store.checkpointer(sid)
    await cp.save(messages=[Message.user("one"), Message.assistant("1")],
                  state={"turn_id": "t1", "last_termination": "natural"}, status="active",
                  turn_id="t1")
    await cp.save(messages=[Message.user("one"), Message.assistant("1"), Message.user("two"),
                            Message.assistant("2")],
                  state={"turn_id": "t2", "last_termination": "natural"}, status="active",
                  turn_id="t2")
    other = await _thread(console, "-1002", "12", "bob's")
    alice = await console.sign_in(ALICE)
    html = await (await alice.client.get(f"/threads/{sid}")).text()
    assert f'action="/threads/{sid.replace(":", "%3A")}/fork"' in html
    token = await alice.csrf()
    r = await alice.client.post(f"/threads/{sid}/fork", data={"at": "1", "csrf": token},
                                headers={"Accept": "application/json"})
    assert r.status == 200, await r.text()
    made = await r.json()
    assert made["parent_session_id"] == sid and made["turn"] == 1
    forked = await console.store.sessions.get(made["forked"])
    assert forked is not None and forked.parent_session_id == sid
    restored = await console.store.checkpointer(made["forked"]).load()
    assert restored is not None and [m.text for m in restored.messages] == ["one", "1"]
    original = await console.store.checkpointer(sid).load()
    assert original is not None and len(original.messages) == 4
    r = await alice.client.post(f"/threads/{sid}/fork", data={"at": "9", "csrf": token})
    assert r.status == 409 and "finished turn" in await r.text()
    r = await alice.client.post(f"/threads/{other}/fork", data={"csrf": token})
    assert r.status == 404
    r = await alice.client.post(f"/threads/{sid}/fork", data={"at": "1"})  # no CSRF token
    assert r.status == 403
