"""A voice note's transcript is kept in its attachment record (``channel_attachments.
transcript``), on SQLite and PostgreSQL: the first one written holds (two replicas racing
keep one), it survives a reopen, and a database of the previous bots revision (rows without
the column) upgrades with its rows kept and no transcript in them."""

from __future__ import annotations

import uuid
from pathlib import Path

from sqlalchemy import create_engine, text

from bots.store import AttachmentRecord, AttachmentRecords
from geode.store import Store, open_store


def _ev() -> int:
    return uuid.uuid4().int % 10**12  # the PostgreSQL variant may share rows


async def test_the_first_transcript_written_holds(store: Store) -> None:
    recs = AttachmentRecords(store=store)
    ev = _ev()
    await recs.add(AttachmentRecord(event_id=ev, idx=0, status="saved", path="threads/1/v",
                                    size=3, sha256="ab" * 32))
    assert (await recs.for_event(ev))[0].transcript is None  # not transcribed yet
    assert await recs.set_transcript(ev, 0, "restart staging tonight") == (
        "restart staging tonight")
    # a second writer (a replica that transcribed it too) is given the first one back
    assert await recs.set_transcript(ev, 0, "restart the stage tonight") == (
        "restart staging tonight")
    rec = (await recs.for_event(ev))[0]
    assert rec.transcript == "restart staging tonight"
    assert rec.to_json()["transcript"] == "restart staging tonight"


async def test_a_transcript_survives_a_reopen(store_url: str) -> None:
    ev = _ev()
    async with await open_store(store_url) as first:
        recs = AttachmentRecords(store=first)
        await recs.add(AttachmentRecord(event_id=ev, idx=0, status="saved", path="p", size=1))
        await recs.set_transcript(ev, 0, "heard")
    async with await open_store(store_url) as second:
        assert (await AttachmentRecords(store=second).for_event(ev))[0].transcript == "heard"


async def test_a_database_before_the_column_keeps_its_records(tmp_path: Path) -> None:
    from alembic import command

    from geode.store.schema import _alembic_config

    (tmp_path / "home").mkdir()
    url = f"sqlite:///{tmp_path / 'home' / 'geode.db'}"
    await (await open_store(url)).aclose()
    engine = create_engine(url)
    with engine.begin() as conn:  # back to the revision before the column, with a row in it
        command.downgrade(_alembic_config(conn), "bots_0004")
        conn.execute(text(
            "INSERT INTO channel_attachments (event_id, idx, session_id, platform, file_ref,"
            " name, mime, status, reason, path, size, sha256, created_at) VALUES (7, 0, 's',"
            " 'telegram', 'F', 'voice', 'audio/ogg', 'saved', '', 'threads/7/7-0-voice', 3,"
            " '', '2026-12-01 00:00:00')"))
        assert "transcript" not in {r[1] for r in conn.execute(text(
            "PRAGMA table_info(channel_attachments)"))}
    engine.dispose()
    store = await open_store(url)  # migrates it
    try:
        recs = AttachmentRecords(store=store)
        rec = (await recs.for_event(7))[0]
        assert (rec.path, rec.transcript) == ("threads/7/7-0-voice", None)
        assert await recs.set_transcript(7, 0, "again") == "again"
    finally:
        await store.aclose()
