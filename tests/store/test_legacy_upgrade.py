"""A database made by the linear-chain release (``alembic_version = '0012'``, the bots'
tables made by geode's migrations) upgrades to the branched layout in place: its rows are
read back, its schema equals the models, every branch is at its head."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import insert
from sqlalchemy.engine import Connection

from bots.store import CHANNEL_METADATA, PairingStore
from bots.store._tables import pairing_table
from geode.store import open_store, schema, status, upgrade
from geode.store._engines import build_engine, normalize_url
from geode.store.models import all_metadata, sessions_table, utcnow
from tests.store.test_migrations import _diff

FIXTURE = Path(__file__).parent / "data" / "legacy_0012.sqlite"


def _versions_sqlite(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT version_num FROM alembic_version")}


async def _read_back(url: str, *, session_id: str, code: str) -> None:
    async with await open_store(url, migrate=False) as store:
        record = await store.sessions.get(session_id)
        assert record is not None and record.title == "made by the 0012 release"
        codes = {p.code: p for p in await PairingStore(store=store).list()}
        assert codes[code].sender == "u-legacy" and codes[code].status == "pending"
        async with store.read() as conn:
            assert await conn.run_sync(_diff(all_metadata(CHANNEL_METADATA))) == []
        # still a working database: new rows go in beside the old ones
        sid = await store.sessions.create(mode="headless", model="m")
        assert await store.sessions.exists(sid)


async def test_the_0012_release_database_upgrades_in_place(tmp_path: Path) -> None:
    db = tmp_path / "geode.db"
    shutil.copyfile(FIXTURE, db)
    url = f"sqlite:///{db}"
    assert _versions_sqlite(db) == {schema.LEGACY_HEAD}

    before = {b.branch: b.current for b in await status(url)}
    assert before == {"bots": "legacy 0012", "geode": "legacy 0012"}

    assert await upgrade(url) == schema.heads()
    assert _versions_sqlite(db) == schema.expected_versions()
    after = await status(url)
    assert all(b.is_current for b in after), after
    assert {b.branch for b in after} == {"geode", "bots"}
    await _read_back(url, session_id="legacy-session-1", code="XR2NUJ7U")


def _legacy_schema(conn: Connection, target: str) -> None:
    command.upgrade(schema._alembic_config(conn, legacy=True), target)


def _legacy_rows(conn: Connection) -> None:
    now = utcnow()
    conn.execute(insert(sessions_table).values(
        id="legacy-session-1", created_at=now, updated_at=now, status="active",
        model="scripted", mode="headless", title="made by the 0012 release",
        parent_session_id=None, metadata={}, last_seq=0, message_count=0))
    conn.execute(insert(pairing_table).values(
        code="XR2NUJ7U", platform="telegram", sender="u-legacy", sender_name="Legacy",
        channel="c-1", status="pending", issued_at=1_800_000_000, expires_at=1_800_003_600,
        approved_at=None, created_at=now))


@pytest.mark.parametrize("legacy_revision", [
    "0012",  # the last linear release: stamped, nothing migrated
    "0009",  # an older one: the legacy chain runs to 0012 first, then it is stamped
])
async def test_a_legacy_database_upgrades_in_place(store_url: str, legacy_revision: str) -> None:
    """SQLite and PostgreSQL: the legacy schema made by running the frozen legacy revisions
    (what the releases before the branches ran), rows written, then today's upgrade."""
    parsed = normalize_url(store_url)
    engine = build_engine(parsed)
    try:
        async with engine.connect() as aconn:
            aconn = await aconn.execution_options(geode_write=True)
            async with aconn.begin():
                await aconn.run_sync(_legacy_schema, legacy_revision)
                await aconn.run_sync(_legacy_rows)
            rows: Any = await aconn.exec_driver_sql("SELECT version_num FROM alembic_version")
            assert {r[0] for r in rows} == {legacy_revision}
            await aconn.rollback()
    finally:
        await engine.dispose()

    assert await upgrade(store_url) == schema.heads()
    assert await upgrade(store_url) == schema.heads()  # idempotent
    assert all(b.is_current for b in await status(store_url))
    await _read_back(store_url, session_id="legacy-session-1", code="XR2NUJ7U")
