"""The migrations produce exactly the models' schema, on SQLite and on PostgreSQL."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, Table
from sqlalchemy.engine import Connection

from bots.store import CHANNEL_METADATA
from geode.store import Store, schema, upgrade
from geode.store.models import all_metadata
from geode.store.schema import heads


def _diff(metadata: MetaData) -> Any:
    def run(conn: Connection) -> list[Any]:
        ctx = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        return list(compare_metadata(ctx, metadata))

    return run


async def test_migrated_schema_equals_models(store_url: str) -> None:
    assert await upgrade(store_url) == heads()
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
        versions = {r[0] for r in await conn.exec_driver_sql(
            "SELECT version_num FROM alembic_version")}
        diffs = await conn.run_sync(_diff(all_metadata(CHANNEL_METADATA)))
    assert versions == schema.expected_versions()
    assert diffs == []


def test_head_and_known_revisions_agree_with_alembic() -> None:
    import os

    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from geode.store import schema

    cfg = Config(str(schema.MIGRATIONS.parent / "alembic.ini"))
    cfg.set_main_option("script_location", str(schema.MIGRATIONS))
    cfg.set_main_option("version_locations",
                        os.pathsep.join(str(p) for p in schema.version_locations()))
    scripts = ScriptDirectory.from_config(cfg)
    assert heads() == tuple(sorted(scripts.get_heads()))
    assert set(schema._scripts()) == {s.revision for s in scripts.walk_revisions()}
    assert set(schema.branch_heads()) == {"geode", "bots"}
    assert schema.branch_heads()["geode"] in scripts.get_revisions("geode@head")[0].revision
    assert "ffff" not in schema._scripts()
