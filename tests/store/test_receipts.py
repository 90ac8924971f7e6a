"""Effect receipts: intended -> done / failed / uncertain; never dispatched twice."""

from __future__ import annotations

import pytest

from geode.store import DuplicateReceiptError, Store, UnknownReceiptError, open_store


async def _intend(
    store: Store, call_id: str, session_id: str = "s1", tool: str = "write_file"
) -> None:
    await store.receipts.intend(
        session_id=session_id, turn_id="t1", call_id=call_id, tool=tool, args_hash="h-" + call_id
    )


async def test_intend_then_done_and_failed(store: Store) -> None:
    await _intend(store, "c1")
    await _intend(store, "c2", tool="bash")
    assert [r.status for r in await store.receipts.list_for("s1")] == ["intended", "intended"]

    await store.receipts.finish(
        session_id="s1", call_id="c1", status="done", detail="wrote 3 bytes"
    )
    await store.receipts.finish(session_id="s1", call_id="c2", status="failed", detail="exit 1")
    rows = await store.receipts.list_for("s1")
    assert [(r.call_id, r.tool, r.args_hash, r.status, r.detail) for r in rows] == [
        ("c1", "write_file", "h-c1", "done", "wrote 3 bytes"),
        ("c2", "bash", "h-c2", "failed", "exit 1"),
    ]
    assert rows[0].updated_at >= rows[0].created_at


async def test_intend_is_durable_when_it_returns(store_url: str) -> None:
    """Another engine (another process after a crash) sees the receipt at once."""
    async with await open_store(store_url) as writer:
        await _intend(writer, "c-durable")
        async with await open_store(store_url) as other:
            got = await other.receipts.get("s1", "c-durable")
            assert got is not None and got.status == "intended"


async def test_resume_marks_open_receipts_uncertain_and_returns_them(store: Store) -> None:
    await _intend(store, "done-1")
    await store.receipts.finish(session_id="s1", call_id="done-1", status="done")
    await _intend(store, "open-1")
    await _intend(store, "open-2", tool="send_message")
    await _intend(store, "other-session", session_id="s2")

    changed = await store.receipts.mark_uncertain_open("s1")
    assert [(r.call_id, r.tool, r.status) for r in changed] == [
        ("open-1", "write_file", "uncertain"),
        ("open-2", "send_message", "uncertain"),
    ]
    assert "unknown" in changed[0].detail
    stored = {r.call_id: r.status for r in await store.receipts.list_for("s1")}
    assert stored == {"done-1": "done", "open-1": "uncertain", "open-2": "uncertain"}
    # Other sessions are not touched; a second resume finds nothing open.
    assert (await store.receipts.get("s2", "other-session")).status == "intended"  # type: ignore[union-attr]
    assert await store.receipts.mark_uncertain_open("s1") == []


async def test_a_call_with_a_receipt_is_not_intended_again(store: Store) -> None:
    await _intend(store, "in-flight")
    with pytest.raises(DuplicateReceiptError, match="in-flight"):
        await _intend(store, "in-flight")
    await _intend(store, "finished")
    await store.receipts.finish(session_id="s1", call_id="finished", status="done")
    with pytest.raises(DuplicateReceiptError, match="done"):
        await _intend(store, "finished")
    statuses = {r.call_id: r.status for r in await store.receipts.list_for("s1")}
    assert statuses == {"in-flight": "intended", "finished": "done"}


async def test_an_uncertain_receipt_is_rearmed_only_for_the_same_arguments(store: Store) -> None:
    """The resume path re-submits idempotent calls; the receipt goes back to intended."""
    await _intend(store, "c1")
    await store.receipts.mark_uncertain_open("s1")
    with pytest.raises(DuplicateReceiptError):
        await store.receipts.intend(
            session_id="s1", turn_id="t2", call_id="c1", tool="write_file", args_hash="other"
        )
    await store.receipts.intend(
        session_id="s1", turn_id="t2", call_id="c1", tool="write_file", args_hash="h-c1"
    )
    (receipt,) = await store.receipts.list_for("s1")
    assert (receipt.status, receipt.turn_id, receipt.detail) == (
        "intended",
        "t2",
        "retry after uncertain",
    )


async def test_finish_rules(store: Store) -> None:
    with pytest.raises(UnknownReceiptError, match="never"):
        await store.receipts.finish(session_id="s1", call_id="never", status="done")
    await _intend(store, "c1")
    await store.receipts.finish(session_id="s1", call_id="c1", status="done")
    await store.receipts.finish(session_id="s1", call_id="c1", status="done")  # idempotent repeat
    with pytest.raises(UnknownReceiptError, match="done"):
        await store.receipts.finish(session_id="s1", call_id="c1", status="failed")
    # Reconciliation: an uncertain receipt may be settled once someone checked.
    await _intend(store, "c2")
    await store.receipts.mark_uncertain_open("s1")
    await store.receipts.finish(
        session_id="s1", call_id="c2", status="failed", detail="checked: not applied"
    )
    assert (await store.receipts.get("s1", "c2")).status == "failed"  # type: ignore[union-attr]


async def test_the_same_call_id_in_two_sessions_is_two_receipts(store: Store) -> None:
    # Vendors' tool_use ids are only unique per conversation; receipts key on both.
    await _intend(store, "toolu_1", session_id="s1")
    await _intend(store, "toolu_1", session_id="s2")
    await store.receipts.finish(session_id="s2", call_id="toolu_1", status="done")
    assert (await store.receipts.get("s1", "toolu_1")).status == "intended"  # type: ignore[union-attr]
    assert (await store.receipts.get("s2", "toolu_1")).status == "done"  # type: ignore[union-attr]
