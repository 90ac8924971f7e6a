"""The pump's claim of a free thread's events, counted: the candidates (with the store's
clock), the lease taken, the events claimed — three statements, and the lease's times
come from the store's clock read in that transaction."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import event, select

from bots.events import InboundEvent
from bots.store._tables import thread_leases_table
from bots.store.inbound import InboundLog
from bots.store.leases import ThreadLeases, _now_ms
from geode.store import Store


def _event(ws: str, thread: int, n: int) -> InboundEvent:
    return InboundEvent(platform="telegram", workspace=ws, channel="-100",
                        thread_root=str(thread), message_id=f"{thread}.{n}", sender="7",
                        dedupe_key=f"telegram:{ws}:-100:{thread}.{n}", text=f"t{thread} m{n}")


async def _clock(store: Store) -> int:
    query = select(_now_ms(store))
    return int(await store.run_read(lambda conn: conn.execute(query).scalar_one()))


async def test_claiming_a_free_threads_events_is_three_statements(store: Store) -> None:
    ws = uuid.uuid4().hex[:10]  # the PostgreSQL variant shares one database
    log = InboundLog(store=store)
    leases = ThreadLeases(store=store, owner="a", ttl_s=30)
    await log.record([(_event(ws, 1, 1), "received"), (_event(ws, 1, 2), "received")])
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement.split()[0])

    before = await _clock(store)
    event.listen(store.sync_engine, "before_cursor_execute", seen)
    try:
        claimed = await log.claim_batch("telegram", ws, owner="a", leases=leases)
        nothing = await log.claim_batch("telegram", ws, owner="a", leases=leases)
    finally:
        event.remove(store.sync_engine, "before_cursor_execute", seen)
    after = await _clock(store)
    assert [e.event.text for e in claimed] == ["t1 m1", "t1 m2"]
    assert nothing == []
    # claim: candidates + clock, lease upsert, claim; the empty one: candidates only
    assert statements == ["SELECT", "INSERT", "UPDATE", "SELECT"]
    t = thread_leases_table
    row = (await store.run_read(lambda conn: conn.execute(
        select(t.c.owner, t.c.expires_at, t.c.touched_at).where(t.c.workspace == ws)).one()))
    assert row.owner == "a"
    assert before <= row.touched_at <= after
    assert row.expires_at == row.touched_at + 30_000
