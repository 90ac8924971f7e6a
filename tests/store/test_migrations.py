"""The migrations produce exactly the models' schema, on SQLite and on PostgreSQL."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, Table
from sqlalchemy.engine import Connection

from bots.store import CHANNEL_METADATA
from geode.store import Store, upgrade
from geode.store.engine import head_revision
from geode.store.models import all_metadata


def _diff(metadata: MetaData) -> Any:
    def run(conn: Connection) -> list[Any]:
        ctx = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        return list(compare_metadata(ctx, metadata))

    return run


async def test_migrated_schema_equals_models(store_url: str) -> None:
    assert await upgrade(store_url) == head_revision()
    from geode.store import open_store

    async with await open_store(store_url, migrate=False) as store:
        async with store.read() as conn:
            diffs = await conn.run_sync(_diff(all_metadata(CHANNEL_METADATA)))
            assert diffs == []

            # The comparison has teeth: a table the migrations lack is reported.
            extra = MetaData()
            for table in all_metadata(CHANNEL_METADATA).tables.values():
                table.to_metadata(extra)
            Table("not_migrated", extra, Column("id", Integer, primary_key=True))
            drift = await conn.run_sync(_diff(extra))
            assert [d[0] for d in drift] == ["add_table"]
            assert drift[0][1].name == "not_migrated"


async def test_open_store_migrates_a_fresh_database(store: Store) -> None:
    async with store.read() as conn:
        version = (await conn.exec_driver_sql("SELECT version_num FROM alembic_version")).scalar()
        diffs = await conn.run_sync(_diff(all_metadata(CHANNEL_METADATA)))
    assert version == head_revision()
    assert diffs == []


def test_head_and_known_revisions_agree_with_alembic() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from geode.store import engine

    cfg = Config(str(engine._HERE / "alembic.ini"))
    cfg.set_main_option("script_location", str(engine._HERE / "migrations"))
    scripts = ScriptDirectory.from_config(cfg)
    assert head_revision() == scripts.get_current_head()
    assert set(engine._revisions()) == {s.revision for s in scripts.walk_revisions()}
    assert all(engine._known_revision(s.revision) for s in scripts.walk_revisions())
    assert not engine._known_revision("ffff")
