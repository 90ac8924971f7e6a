"""Statements of a channel turn's records, counted on both dialects: a new session's
first checkpoint moves its head without reading it first, and a delivered reply reads
when its message came in from the event's own update. The states those reads guarded
are still handled: a first save on a session with a chain continues that chain, one on
a finished session is refused, and every delivered row still reports its latency."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from bots.events import InboundEvent
from bots.format import Chunk
from bots.store.inbound import InboundLog
from bots.store.outbox import Outbox
from geode.messages import Message
from geode.store import Store
from geode.store.sessions import IllegalTransitionError


@contextmanager
def _statements(store: Store) -> Iterator[list[str]]:
    seen: list[str] = []

    def on(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement.split()[0])

    event.listen(store.sync_engine, "before_cursor_execute", on)
    try:
        yield seen
    finally:
        event.remove(store.sync_engine, "before_cursor_execute", on)


def _said(text: str) -> Message:
    return Message.model_validate({"role": "user", "content": [{"type": "text", "text": text}]})


async def test_the_first_save_on_a_new_session_moves_its_head_unread(store: Store) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await store.sessions.create(sid, mode="DAEMON", model="m")
    with _statements(store) as seen:
        await store.checkpointer(sid).save(messages=[_said("one")], state={}, status="active")
    assert seen == ["UPDATE", "INSERT", "INSERT"]  # head, message row, link
    restored = await store.checkpointer(sid).load()
    assert restored is not None and (restored.seq, len(restored.messages)) == (1, 1)


async def test_a_first_save_on_a_session_with_a_chain_continues_it(store: Store) -> None:
    sid = f"s-{uuid.uuid4().hex[:8]}"
    await store.sessions.create(sid, mode="DAEMON", model="m")
    await store.checkpointer(sid).save(messages=[_said("one"), _said("two")], state={},
                                       status="active")
    # a new checkpointer that did not load the chain: its assumption fails, it reads
    other = store.checkpointer(sid)
    await other.save(messages=[_said("three")], state={"k": 1}, status="paused")
    restored = await store.checkpointer(sid).load()
    assert restored is not None
    assert (restored.seq, restored.status, restored.state) == (2, "paused", {"k": 1})
    assert [m.text for m in restored.messages] == ["three"]
    await store.sessions.set_status(sid, "completed")
    with pytest.raises(IllegalTransitionError):
        await store.checkpointer(sid).save(messages=[_said("late")], state={},
                                           status="active")


def _event(ws: str) -> InboundEvent:
    return InboundEvent(platform="telegram", workspace=ws, channel="-100", thread_root="1",
                        message_id="1", sender="7", dedupe_key=f"telegram:{ws}:-100:1",
                        text="hi")


async def test_a_delivered_reply_reads_its_latency_with_the_events_update(
    store: Store,
) -> None:
    ws = uuid.uuid4().hex[:10]
    ev = _event(ws)
    (event_id,) = await InboundLog(store=store).record([(ev, "received")])
    outbox = Outbox(store=store)
    row = await outbox.open_turn(event_id=event_id, session_id="s", turn_key="t",
                                 platform="telegram", workspace=ws, target=ev.target())
    assert row is not None
    with _statements(store) as seen:
        sent, latency = await outbox.record_sent(row, ["m1"])
    assert seen == ["UPDATE", "UPDATE"]  # the row, the event (returning when it came in)
    assert sent.status == "sent" and sent.message_ids == ["m1"]
    assert latency is not None and latency >= 0
    assert (await InboundLog(store=store).get(event_id)).status == "done"  # type: ignore[union-attr]
    # a notice's event is not updated by its delivery: its time is read on its own
    await outbox.add_notice(session_key="s", turn_key="n", event_id=event_id,
                            platform="telegram", workspace=ws, target=ev.target(),
                            chunks=[Chunk(formatted="n", fallback="n")])
    notice = await outbox.get("s", "n")
    assert notice is not None
    with _statements(store) as seen:
        _, latency = await outbox.record_sent(notice, ["m2"])
    assert seen == ["UPDATE", "SELECT"]
    assert latency is not None and latency >= 0
