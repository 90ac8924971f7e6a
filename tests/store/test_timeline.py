"""SessionTimeline: append-only, redacted, bounded, never breaks a run."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text

from geode.store import Store, open_store
from geode.store.models import timeline_table, utcnow


async def test_rows_are_stored_and_listed_in_append_order(store: Store) -> None:
    for kind in ("turn.started", "tool.proposed", "tool.denied", "turn.ended"):
        await store.timeline.append(
            session_id="s1",
            turn_id="t1",
            kind=kind,
            correlation_id="corr-1",
            payload={"tool": "bash"},
        )
    await store.timeline.append(session_id="s2", turn_id="t9", kind="turn.started")
    rows = await store.timeline.list("s1")
    assert [r.kind for r in rows] == ["turn.started", "tool.proposed", "tool.denied", "turn.ended"]
    assert {r.correlation_id for r in rows} == {"corr-1"}
    assert rows[2].payload == {"tool": "bash"}
    assert rows[0].id < rows[1].id and rows[0].created_at is not None
    assert [r.kind for r in await store.timeline.list("s1", limit=2)] == [
        "turn.started",
        "tool.proposed",
    ]
    assert [r.payload for r in await store.timeline.list("s2")] == [{}]


async def test_payloads_are_redacted_and_bounded(store_url: str) -> None:
    async with await open_store(store_url, secrets=("my-literal-secret-123",)) as store:
        await store.timeline.append(
            session_id="s1",
            turn_id="t1",
            kind="tool.started",
            payload={
                "args": {"api_key": "abc", "cmd": "curl -H 'Authorization: Bearer abcdefghijkl'"},
                "note": "token my-literal-secret-123 and sk-ant-api03-aaaaaaaaaaaaaaaaaaaa",
                "usage": {"input_tokens": 12},
                "big": "x" * 100_000,
                "many": list(range(1_000)),
            },
        )
        (row,) = await store.timeline.list("s1")
    dumped = str(row.payload)
    for secret in ("abc'", "abcdefghijkl", "my-literal-secret-123", "sk-ant-api03"):
        assert secret not in dumped
    assert row.payload["args"]["api_key"] == "[REDACTED]"
    assert row.payload["usage"] == {"input_tokens": 12}
    assert len(row.payload["big"]) < 9_000 and "truncated" in row.payload["big"]
    assert len(row.payload["many"]) == 201


async def test_huge_payload_is_replaced_by_a_preview(store: Store) -> None:
    await store.timeline.append(
        session_id="s1",
        turn_id="t1",
        kind="tool.finished",
        payload={f"k{i}": "y" * 5_000 for i in range(100)},
    )
    (row,) = await store.timeline.list("s1")
    assert row.payload["truncated"] is True and row.payload["size"] > 64_000
    assert len(row.payload["preview"]) == 4_000


async def test_a_failed_write_is_counted_not_raised(store: Store) -> None:
    async with store.write() as conn:
        await conn.execute(text("DROP TABLE timeline_events"))
    await store.timeline.append(session_id="s1", turn_id="t1", kind="turn.started")
    await store.timeline.append(session_id="s1", turn_id="t1", kind="turn.ended")
    assert store.timeline.failures == 2


async def test_prune_deletes_only_rows_past_retention(store: Store) -> None:
    async with store.write() as conn:
        await conn.execute(
            timeline_table.insert().values(
                session_id="s1",
                turn_id="old",
                kind="turn.started",
                correlation_id="",
                payload={},
                created_at=utcnow() - timedelta(days=200),
            )
        )
    await store.timeline.append(session_id="s1", turn_id="new", kind="turn.started")
    assert await store.timeline.prune(180) == 1
    assert [r.turn_id for r in await store.timeline.list("s1")] == ["new"]
