"""The checkpoint chain: save before execute, roundtrips, long sessions, atomicity."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from geode.errors import CheckpointSaveError
from geode.loop.protocols import BatchSaveFailed, Checkpointer, TurnInfo
from geode.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from geode.store import (
    IllegalTransitionError,
    SessionCheckpointer,
    SessionNotFoundError,
    Store,
    open_store,
)
from geode.store.models import messages_table, sessions_table


def _turn(sid: str, turn_id: str = "turn-1", rnd: int = 1) -> TurnInfo:
    return TurnInfo(
        session_id=sid, turn_id=turn_id, round=rnd, correlation_id="c-1", mode="headless"
    )


def _conversation(n: int) -> list[Message]:
    """n messages mixing text, tool calls and tool results (every block type the loop stores)."""
    out: list[Message] = []
    for i in range(n):
        if i % 3 == 0:
            out.append(Message.user(f"question {i} ünïcode ✓"))
        elif i % 3 == 1:
            out.append(
                Message(
                    role="assistant",
                    content=[
                        TextBlock(text=f"calling tool {i}"),
                        ToolUseBlock(id=f"call-{i}", name="read_file", input={"path": f"/f/{i}"}),
                    ],
                )
            )
        else:
            out.append(
                Message(
                    role="user",
                    content=[
                        ToolResultBlock.text(f"call-{i - 1}", f"result {i}", is_error=i % 2 == 0)
                    ],
                )
            )
    return out


async def _message_rows(store: Store, sid: str) -> list[tuple[int, Any]]:
    async with store.read() as conn:
        rows = await conn.execute(
            select(messages_table.c.idx, messages_table.c.created_at)
            .where(messages_table.c.session_id == sid)
            .order_by(messages_table.c.idx)
        )
        return [(r.idx, r.created_at) for r in rows]


async def test_checkpointer_satisfies_the_loop_protocol(store: Store) -> None:
    sid = await store.sessions.create(mode="headless", model="m")
    assert isinstance(store.checkpointer(sid), Checkpointer)


async def test_roundtrip_restores_messages_state_guard_counters_and_status(store: Store) -> None:
    sid = await store.sessions.create(mode="daemon", model="claude-x")
    cp = store.checkpointer(sid)
    state = {
        "round": 3,
        "turn_id": "turn-7",
        "guards": {"repair_attempts": 1, "max_rounds_left": 17, "cost_usd": 0.25},
        "pending": ["call-1"],
        "nested": {"a": [1, 2, {"b": None}], "flag": True},
    }
    msgs = _conversation(5)
    await cp.save(messages=msgs, state=state, status="paused")

    fresh = store.checkpointer(sid)
    restored = await fresh.load()
    assert restored is not None
    assert restored.messages == msgs
    assert restored.state == state
    assert restored.state["guards"]["repair_attempts"] == 1
    assert restored.status == "paused"
    assert restored.seq == 1
    assert (await store.sessions.get(sid)).status == "paused"  # type: ignore[union-attr]


async def test_load_of_a_session_without_checkpoints_is_none(store: Store) -> None:
    sid = await store.sessions.create(mode="headless", model="m")
    assert await store.checkpointer(sid).load() is None
    assert await store.checkpointer("no-such-session").load() is None


async def test_chain_records_each_kind_in_order(store: Store) -> None:
    sid = await store.sessions.create(mode="headless", model="m")
    cp = store.checkpointer(sid)
    msgs = [Message.user("do it")]
    await cp.save(messages=msgs, state={"round": 0}, status="active", kind="turn_start")
    msgs.append(_conversation(2)[1])
    await cp.save_batch_proposed(messages=msgs, state={"round": 1}, turn=_turn(sid))
    msgs.append(_conversation(3)[2])
    await cp.save_batch_done(messages=msgs, state={"round": 1}, turn=_turn(sid))
    msgs.append(Message.assistant("done"))
    await cp.save(messages=msgs, state={"round": 2}, status="completed")

    rows = await store.checkpoints.list(sid)
    assert [(r.seq, r.kind, r.message_count) for r in rows] == [
        (1, "turn_start", 1),
        (2, "batch_proposed", 2),
        (3, "batch_done", 3),
        (4, "final", 4),
    ]
    assert rows[1].turn_id == "turn-1"
    restored = await store.checkpointer(sid).load()
    assert restored is not None and restored.kind == "final" and restored.messages == msgs


async def test_resume_of_a_500_message_session_keeps_every_message_in_order(store_url: str) -> None:
    msgs = _conversation(500)
    async with await open_store(store_url) as first:
        sid = await first.sessions.create(mode="daemon", model="m")
        cp = first.checkpointer(sid)
        for end in range(10, 501, 10):  # grown round by round, like a real session
            await cp.save(messages=msgs[:end], state={"round": end // 10}, status="active")

    # A new process: new engine, new checkpointer, nothing cached.
    async with await open_store(store_url) as second:
        cp2 = second.checkpointer(sid)
        restored = await cp2.load()
        assert restored is not None
        assert len(restored.messages) == 500
        assert restored.messages == msgs
        assert [m.text for m in restored.messages[:4]] == [m.text for m in msgs[:4]]
        assert restored.state == {"round": 50}

        # The resumed thread continues: one more message is appended after the 500.
        more = [*restored.messages, Message.user("and now?")]
        await cp2.save(messages=more, state={"round": 51}, status="active")
        again = await second.checkpointer(sid).load()
        assert again is not None and again.messages == more


async def test_a_round_writes_only_new_messages(store: Store) -> None:
    sid = await store.sessions.create(mode="headless", model="m")
    cp = store.checkpointer(sid)
    msgs = _conversation(200)
    await cp.save(messages=msgs, state={}, status="active")
    before = await _message_rows(store, sid)

    msgs.append(Message.assistant("one more"))
    await cp.save(messages=msgs, state={}, status="active")
    after = await _message_rows(store, sid)

    assert len(after) == 201
    # Existing rows were not rewritten: same created_at for all 200 old rows.
    assert after[:200] == before
    assert after[200][0] == 200


async def test_compaction_rewrite_replaces_the_stored_messages(store: Store) -> None:
    sid = await store.sessions.create(mode="headless", model="m")
    cp = store.checkpointer(sid)
    msgs = _conversation(60)
    await cp.save(messages=msgs, state={}, status="active")
    compacted = [Message.user("summary of 50 messages"), *msgs[50:]]
    await cp.save(messages=compacted, state={"compactions": 1}, status="active")

    restored = await store.checkpointer(sid).load()
    assert restored is not None and restored.messages == compacted
    assert len(await _message_rows(store, sid)) == 11


async def test_a_chain_moved_by_another_writer_is_rewritten_not_corrupted(store: Store) -> None:
    sid = await store.sessions.create(mode="headless", model="m")
    a = store.checkpointer(sid)
    base = _conversation(3)
    await a.save(messages=base, state={"by": "a"}, status="active")
    b = store.checkpointer(sid)  # e.g. another replica after a lease hand-over
    await b.load()
    await b.save(
        messages=[*base, Message.user("b1"), Message.user("b2")], state={"by": "b"}, status="active"
    )
    # `a` still believes the store holds its 3 messages; its save must not append blindly.
    mine = [*base, Message.user("a1")]
    await a.save(messages=mine, state={"by": "a"}, status="active")

    restored = await store.checkpointer(sid).load()
    assert restored is not None
    assert restored.messages == mine
    assert restored.state == {"by": "a"}
    assert len(await _message_rows(store, sid)) == 4


async def test_save_batch_proposed_on_a_failing_store_raises_and_writes_nothing(
    store: Store,
) -> None:
    """Save before execute: if the batch cannot be saved, the caller gets BatchSaveFailed."""
    sid = await store.sessions.create(mode="headless", model="m")
    cp = store.checkpointer(sid)
    msgs = _conversation(2)
    await cp.save(messages=msgs[:1], state={"round": 0}, status="active")

    async with store.write() as conn:  # break the store under the checkpointer
        await conn.execute(text("DROP TABLE checkpoints"))

    handler_calls: list[str] = []

    async def run_batch() -> None:
        # What the loop does: save the proposal, and only then dispatch.
        await cp.save_batch_proposed(messages=msgs, state={"round": 1}, turn=_turn(sid))
        handler_calls.append("ran")

    with pytest.raises(BatchSaveFailed) as info:
        await run_batch()
    assert handler_calls == []
    assert isinstance(info.value.__cause__, DBAPIError)
    assert sid in str(info.value) and "no tool" in str(info.value)
    # Atomic: the proposed assistant message did not land without its checkpoint.
    assert [idx for idx, _ in await _message_rows(store, sid)] == [0]
    async with store.read() as conn:
        head = (
            await conn.execute(
                select(sessions_table.c.last_seq, sessions_table.c.message_count).where(
                    sessions_table.c.id == sid
                )
            )
        ).one()
    assert tuple(head) == (1, 1)


async def test_batch_on_a_finished_session_is_refused(store: Store) -> None:
    sid = await store.sessions.create(mode="headless", model="m")
    cp = store.checkpointer(sid)
    await cp.save(messages=[Message.user("x")], state={}, status="completed")
    with pytest.raises(BatchSaveFailed) as info:
        await cp.save_batch_proposed(messages=_conversation(2), state={}, turn=_turn(sid))
    assert isinstance(info.value.__cause__, IllegalTransitionError)
    with pytest.raises(IllegalTransitionError, match="reopen"):
        await cp.save(messages=[Message.user("x")], state={}, status="active")

    await store.sessions.reopen(sid)
    await cp.save_batch_proposed(messages=_conversation(2), state={"r": 1}, turn=_turn(sid))
    restored = await cp.load()
    assert (
        restored is not None and restored.status == "active" and restored.kind == "batch_proposed"
    )


async def test_save_for_a_missing_session_names_it(store: Store) -> None:
    cp: SessionCheckpointer = store.checkpointer("ghost")
    with pytest.raises(SessionNotFoundError, match="ghost"):
        await cp.save(messages=[], state={}, status="active")


async def test_unserialisable_state_is_a_checkpoint_save_error(store: Store) -> None:
    sid = await store.sessions.create(mode="headless", model="m")
    cp = store.checkpointer(sid)
    with pytest.raises(CheckpointSaveError, match=sid):
        await cp.save(messages=[], state={"bad": object()}, status="active")
    with pytest.raises(BatchSaveFailed):
        await cp.save_batch_proposed(messages=[], state={"bad": {1, 2}}, turn=_turn(sid))
    assert await cp.load() is None
