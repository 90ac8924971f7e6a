"""The store's work per channel reply, counted (not timed): the write transactions and the
SQL statements in them for one Telegram reply through the real daemon, connector and store.
A change that adds a transaction or statements to every reply fails here; one that removes
some should lower the bounds."""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import event

from tests.bots.conftest import CHAT, finals, settled

#: today's figures (record + claim, accept, the progress message's record + the queue claim
#: (the turn's admission), session, first checkpoint, usage row + final checkpoint, the turn's
#: timeline rows + final answer, delivery)
MAX_TRANSACTIONS = 8
MAX_WRITE_STATEMENTS = 29


async def test_one_telegram_reply_write_transactions_and_statements(make_stack, fake):
    # no periodic work during the counted reply: pump fallback and lease heartbeat far off
    stack = make_stack(options={"pump_interval_s": 60.0, "lease_ttl_s": 120.0})
    await stack.start()
    # a first reply warms up what is done once (the writer connection, caches)
    fake.user_says(CHAT, "@geode_bot warm up", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: warm up"), within=10)
    await settled(stack)
    store = stack.store
    group = store._group
    assert group is not None
    writes: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        writer = group._writer
        if writer is not None and conn is writer.conn:  # statements of write transactions
            writes.append(" ".join(statement.split())[:150])

    run = group._run
    jobs_seen: list[str] = []

    def traced(writer: Any, batch: list[Any]) -> Any:
        jobs_seen.append(", ".join(getattr(j.fn, "__qualname__", type(j.fn).__name__)
                                   for j in batch))
        return run(writer, batch)

    group._run = traced  # type: ignore[method-assign]
    event.listen(store.sync_engine, "before_cursor_execute", seen)
    try:
        batches = group.batches
        fake.user_says(CHAT, "@geode_bot counted", from_user=42)
        await fake.wait_until(lambda: finals(fake, "answer to: counted"), within=10)
        await settled(stack)
        batches = group.batches - batches
    finally:
        event.remove(store.sync_engine, "before_cursor_execute", seen)
        group._run = run  # type: ignore[method-assign]
    if os.environ.get("GEODE_SHOW_STATEMENTS"):
        print(f"\n{batches} transactions, {len(writes)} write statements")
        print("\n".join(["jobs:", *jobs_seen, "statements:", *writes]))
    assert batches == len(jobs_seen)
    assert batches <= MAX_TRANSACTIONS, jobs_seen
    # the model call's usage row is committed with the checkpoint that saves its answer
    assert any("UsageLedger.record" in b and "SessionCheckpointer._save" in b
               for b in jobs_seen), jobs_seen
    # the progress message's id is committed with the turn's next write, before the turn runs:
    # its admission (the queue entry claimed once it holds its lanes, before its session opens)
    assert any("Outbox.record_progress_message" in b and "ChannelQueue.claim" in b
               for b in jobs_seen), jobs_seen
    assert len(writes) <= MAX_WRITE_STATEMENTS, writes
