"""Alembic environment for GEODE's store (SQLite via aiosqlite, PostgreSQL via psycopg 3).

Two ways in:

* programmatic (``geode.store.schema.upgrade`` / ``open_store``): the caller opens an
  async engine, and inside ``AsyncConnection.run_sync`` hands the sync-facing connection in
  ``config.attributes["connection"]``; we migrate on it, in the caller's transaction;
* the ``alembic`` command line: we build an async engine from ``GEODE_STORE_URL`` (or
  ``sqlalchemy.url``) and do the same through ``run_sync``.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy.engine import Connection

from geode.store.models import all_metadata

config = context.config
# The schema to compare against (autogenerate): the harness's tables, plus the metadata of
# other table owners (the channel layer) when the caller hands it in; programmatic
# upgrades do not need it.
target_metadata = all_metadata(*config.attributes.get("extra_metadata", ()))


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        # SQLite cannot ALTER most things; batch mode rebuilds tables for later migrations.
        render_as_batch=connection.dialect.name == "sqlite",
    )


def _run_on(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    url = os.environ.get("GEODE_STORE_URL") or config.get_main_option("sqlalchemy.url") or ""
    if not url:
        raise SystemExit(
            "set GEODE_STORE_URL to the store URL (sqlite:///... or postgresql+psycopg://...)"
        )
    return url


async def _run_standalone() -> None:
    from geode.store._engines import build_engine, normalize_url

    engine = build_engine(normalize_url(_url()))
    try:
        async with engine.connect() as conn:
            conn = await conn.execution_options(geode_write=True)
            async with conn.begin():
                await conn.run_sync(_run_on)
    finally:
        await engine.dispose()


def run_migrations_offline() -> None:
    from geode.store._engines import normalize_url

    context.configure(
        url=normalize_url(_url()),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
    else:
        asyncio.run(_run_standalone())


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
