"""Approval requests in the store (both dialects): one row per proposed call, a decision
applies once and only from an approver, an expired request cannot be approved, two replicas
deciding at once decide once."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from bots.store import ApprovalRequests
from geode.store import Store, open_store

T0 = 1_800_000_000_000  # unix ms


def _request(session: str, call: str = "c1", **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "session_id": session, "turn_id": "t-1", "call_id": call,
        "thread_key": "telegram::-100:7", "platform": "telegram", "workspace": "",
        "channel": "-100", "thread_root": "7", "tool": "write_file",
        "args": {"path": "a.txt", "content": "hi"}, "summary": "write_file a.txt",
        "requested_by": "42", "requested_by_name": "ann", "approvers": ["42", "43"],
        "timeout_s": 300, "now_ms": T0,
    }
    base.update(over)
    return base


def _sid() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"  # the PostgreSQL variant may share rows


async def test_open_is_idempotent_per_call_and_written_before_any_message(store: Store) -> None:
    reqs = ApprovalRequests(store=store)
    sid = _sid()
    first = await reqs.open(**_request(sid))
    assert first.pending and first.message_id is None
    assert first.expires_at == T0 + 300_000
    assert first.approvers == ("42", "43")
    again = await reqs.open(**_request(sid, now_ms=T0 + 5000))  # a resumed turn asks again
    assert again.id == first.id and again.expires_at == first.expires_at
    other = await reqs.open(**_request(sid, call="c2"))
    assert other.id != first.id and other.short_id != first.short_id
    await reqs.set_message(first.id, "555")
    found = await reqs.by_message("telegram", "", "-100", "555")
    assert found is not None and found.id == first.id
    assert (await reqs.by_short_id(first.short_id.lower())) == found
    assert [r.id for r in await reqs.pending(platform="telegram") if r.session_id == sid] == [
        first.id, other.id]


async def test_a_decision_applies_once_and_only_from_an_approver(store: Store) -> None:
    reqs = ApprovalRequests(store=store)
    rec = await reqs.open(**_request(_sid()))
    stranger = await reqs.decide(rec.id, approve=True, by="99", by_name="eve", now_ms=T0 + 1)
    assert not stranger.applied and stranger.record.pending
    yes = await reqs.decide(rec.id, approve=True, by="43", by_name="bob", now_ms=T0 + 2)
    assert yes.applied
    assert (yes.record.status, yes.record.decided_by, yes.record.decided_by_name,
            yes.record.decided_at) == ("approved", "43", "bob", T0 + 2)
    # a double click, and a late deny by the other approver: nothing changes
    twice = await reqs.decide(rec.id, approve=True, by="43", by_name="bob", now_ms=T0 + 3)
    late = await reqs.decide(rec.id, approve=False, by="42", by_name="ann", now_ms=T0 + 4)
    assert not twice.applied and not late.applied
    assert late.record.status == "approved" and late.record.decided_at == T0 + 2
    assert not (await reqs.cancel(rec.id)).applied


async def test_expiry_wins_over_a_late_click_and_cancel_ends_a_wait(store: Store) -> None:
    reqs = ApprovalRequests(store=store)
    sid = _sid()
    rec = await reqs.open(**_request(sid, timeout_s=10))
    assert not (await reqs.expire(rec.id, now_ms=T0 + 9_999)).applied  # not yet
    late = await reqs.decide(rec.id, approve=True, by="42", now_ms=T0 + 10_000)
    assert not late.applied and late.record.pending
    expired = await reqs.expire(rec.id, now_ms=T0 + 10_000)
    assert expired.applied and expired.record.status == "expired"
    other = await reqs.open(**_request(sid, call="c2"))
    cancelled = await reqs.cancel(other.id, now_ms=T0 + 1)
    assert cancelled.applied and cancelled.record.status == "cancelled"
    assert [r.status for r in await reqs.for_session(sid)] == ["expired", "cancelled"]
    with pytest.raises(KeyError):
        await reqs.decide(10**9, approve=True, by="42")


async def test_recovering_a_turn_cancels_its_pending_requests_only(store: Store) -> None:
    reqs = ApprovalRequests(store=store)
    sid = _sid()
    a = await reqs.open(**_request(sid, call="c1"))
    b = await reqs.open(**_request(sid, call="c2"))
    await reqs.decide(b.id, approve=True, by="42", now_ms=T0 + 1)
    other = await reqs.open(**_request(sid, call="c3", turn_id="t-2"))
    assert await reqs.cancel_turn(sid, "t-1", now_ms=T0 + 2) == 1
    assert [(r.id, r.status) for r in await reqs.for_session(sid)] == [
        (a.id, "cancelled"), (b.id, "approved"), (other.id, "pending")]
    late = await reqs.decide(a.id, approve=True, by="42", now_ms=T0 + 3)
    assert not late.applied


async def test_two_replicas_clicking_at_once_decide_once(store_url: str) -> None:
    a, b = await open_store(store_url), await open_store(store_url, migrate=False)
    try:
        reqs = [ApprovalRequests(store=a), ApprovalRequests(store=b)]
        rec = await reqs[0].open(**_request(_sid()))
        results = await asyncio.gather(*(
            reqs[i % 2].decide(rec.id, approve=i % 3 != 0, by="42" if i % 2 else "43",
                               now_ms=T0 + 1 + i)
            for i in range(8)
        ))
        assert sum(r.applied for r in results) == 1
        final = await reqs[1].get(rec.id)
        assert final is not None and final.status in ("approved", "denied")
    finally:
        await a.aclose()
        await b.aclose()
