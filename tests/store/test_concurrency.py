"""50 sessions writing at once: no "database is locked", nothing lost."""

from __future__ import annotations

import asyncio

from geode.loop.protocols import TurnInfo
from geode.messages import Message
from geode.store import Store, open_store


async def _session_worker(store: Store, n: int, rounds: int = 10) -> str:
    sid = await store.sessions.create(f"s-{n:02d}", mode="daemon", model="m")
    cp = store.checkpointer(sid)
    msgs: list[Message] = []
    for r in range(rounds):
        msgs.append(Message.user(f"{n}/{r}"))
        turn = TurnInfo(
            session_id=sid, turn_id=f"t{r}", round=r, correlation_id=f"{n}-{r}", mode="daemon"
        )
        if r % 2:
            await cp.save_batch_proposed(messages=msgs, state={"round": r}, turn=turn)
        else:
            await cp.save(messages=msgs, state={"round": r}, status="active")
        await store.timeline.append(
            session_id=sid,
            turn_id=f"t{r}",
            kind="turn.started",
            correlation_id=f"{n}-{r}",
            payload={"round": r},
        )
        await asyncio.sleep(0)  # let the other sessions interleave
    return sid


async def _assert_all_stored(store: Store, sids: list[str], rounds: int = 10) -> None:
    assert store.timeline.failures == 0
    for sid in sids:
        restored = await store.checkpointer(sid).load()
        assert restored is not None
        assert restored.seq == rounds
        assert [m.text for m in restored.messages] == [
            f"{sid[2:].lstrip('0') or '0'}/{r}" for r in range(rounds)
        ]
        rows = await store.timeline.list(sid)
        assert [r.payload["round"] for r in rows] == list(range(rounds))


async def test_fifty_sessions_write_concurrently(store: Store) -> None:
    results = await asyncio.gather(
        *(_session_worker(store, n) for n in range(50)), return_exceptions=True
    )
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []
    await _assert_all_stored(store, [str(r) for r in results])


async def test_two_stores_on_one_sqlite_file_share_it_without_locking_errors(
    sqlite_url: str,
) -> None:
    """Two engines (two processes' worth of connections) on one file: BEGIN IMMEDIATE +
    busy_timeout make the second writer wait instead of failing."""
    async with await open_store(sqlite_url) as a, await open_store(sqlite_url) as b:
        results = await asyncio.gather(
            *(_session_worker(a if n % 2 else b, n) for n in range(50)), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        assert errors == []
        await _assert_all_stored(a, [str(r) for r in results])
        assert b.timeline.failures == 0
