"""Attachment records in the store (both dialects): one per (event, index), the first one
written holds, a session's records in order."""

from __future__ import annotations

import uuid

from bots.store import AttachmentRecord, AttachmentRecords
from geode.store import Store, open_store


def _ev() -> int:
    return uuid.uuid4().int % 10**12  # the PostgreSQL variant may share rows


async def test_a_record_is_kept_once_per_attachment_and_listed_by_session(store: Store) -> None:
    recs = AttachmentRecords(store=store)
    sid, ev = f"s-{uuid.uuid4().hex[:8]}", _ev()
    saved = AttachmentRecord(event_id=ev, idx=0, status="saved", session_id=sid,
                             platform="telegram", file_ref="F1", name="a.log",
                             mime="text/plain", path="threads/7/7-0-a.log", size=3,
                             sha256="ab" * 32)
    got = await recs.add(saved)
    assert (got.status, got.path, got.size, got.sha256) == ("saved", saved.path, 3, "ab" * 32)
    assert got.created_at is not None
    # a second writer (a replica racing, a rerun) gets the first record back, unchanged
    again = await recs.add(AttachmentRecord(event_id=ev, idx=0, status="refused",
                                            session_id=sid, reason="late"))
    assert (again.status, again.reason, again.path) == ("saved", "", saved.path)
    refused = await recs.add(AttachmentRecord(event_id=ev, idx=1, status="refused",
                                              session_id=sid, name="big.csv",
                                              reason="it is larger than this channel's limit"))
    later = await recs.add(AttachmentRecord(event_id=ev + 1, idx=0, status="saved",
                                            session_id=sid, name="b.png", path="p", size=1))
    assert refused.reason.startswith("it is larger")
    assert sorted(await recs.for_event(ev)) == [0, 1]
    assert [(r.event_id, r.idx, r.name) for r in await recs.for_session(sid)] == [
        (ev, 0, "a.log"), (ev, 1, "big.csv"), (ev + 1, 0, "b.png")]
    assert later.to_json()["index"] == 0 and later.to_json()["status"] == "saved"
    assert await recs.for_session("nobody") == []
    # what `sessions show` prints of a platform link leaves out its signature (the query)
    signed = AttachmentRecord(event_id=1, idx=0, status="saved",
                              file_ref="https://cdn.example/a/x.png?ex=1&hm=sig")
    assert signed.to_json()["file_ref"] == "https://cdn.example/a/x.png"


async def test_records_survive_a_reopen_of_the_store(store_url: str) -> None:
    ev = _ev()
    async with await open_store(store_url) as first:
        await AttachmentRecords(store=first).add(AttachmentRecord(
            event_id=ev, idx=0, status="saved", path="threads/1/x", size=5, sha256="cd" * 32))
    async with await open_store(store_url) as second:
        (rec,) = (await AttachmentRecords(store=second).for_event(ev)).values()
    assert (rec.path, rec.size, rec.sha256) == ("threads/1/x", 5, "cd" * 32)
