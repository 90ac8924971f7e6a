"""Opening the store: drivers, pragmas, bad files, unreachable servers, readiness."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from geode.errors import ConfigError, StoreError
from geode.store import Store, heads, normalize_url, open_store, upgrade


async def test_sqlite_connections_use_wal_busy_timeout_and_normal_sync(tmp_path: Path) -> None:
    db = tmp_path / "nested" / "dir" / "geode.db"  # parent dirs are created
    async with await open_store(f"sqlite:///{db}") as store:
        async with store.read() as conn:
            mode = (await conn.execute(text("PRAGMA journal_mode"))).scalar()
            busy = (await conn.execute(text("PRAGMA busy_timeout"))).scalar()
            sync = (await conn.execute(text("PRAGMA synchronous"))).scalar()
            fks = (await conn.execute(text("PRAGMA foreign_keys"))).scalar()
        assert (mode, busy, sync, fks) == ("wal", 5000, 1, 1)
        assert await store.ping()
        assert store.where == str(db)
    assert db.exists()


def test_url_spellings() -> None:
    assert normalize_url("sqlite:////x/g.db").drivername == "sqlite+aiosqlite"
    assert normalize_url("sqlite+aiosqlite:////x/g.db").database == "/x/g.db"
    assert normalize_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgresql+psycopg://u@h/db").drivername == "postgresql+psycopg"
    with pytest.raises(ConfigError, match="unsupported"):
        normalize_url("mysql://u@h/db")
    with pytest.raises(ConfigError, match="file"):
        normalize_url("sqlite:///:memory:")


@pytest.mark.parametrize("url", [
    "postgresql+psycopg//geode:Pw-in-a-typo-9f3@db/geode",       # the colon of :// missing
    "postgresql://geode:Pw-in-a-typo-9f3@db:notaport/geode",     # a port that is no number
    "postgres://geode:Pw@in-a-typo-9f3@db:5432x/geode",          # and a password with an @
])
def test_a_broken_url_is_a_config_error_that_never_shows_its_password(url: str) -> None:
    """The message is printed on stderr (exit 2) and logged by serve: it says where the URL
    is wrong, with the password masked. A port that is no number was a traceback."""
    with pytest.raises(ConfigError, match="is not a database URL") as info:
        normalize_url(url)
    message = str(info.value)
    assert "Pw" not in message and "typo" not in message and "9f3" not in message
    assert "geode:***@" in message


async def test_corrupt_file_names_the_path_and_the_remedy(tmp_path: Path) -> None:
    db = tmp_path / "geode.db"
    db.write_bytes(b"this is not a database at all" * 200)
    with pytest.raises(StoreError) as info:
        await open_store(f"sqlite:///{db}")
    message = str(info.value)
    assert str(db) in message
    assert "geode db upgrade" in message and "backup" in message


async def test_foreign_sqlite_database_is_refused_untouched(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    with pytest.raises(StoreError) as info:
        await open_store(f"sqlite:///{db}")
    assert str(db) in str(info.value) and "invoices" in str(info.value)
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"invoices"}  # we created nothing in someone else's database


async def test_unreachable_postgres_names_the_host_never_the_password() -> None:
    url = "postgresql+psycopg://geode:TopSecretPw99@127.0.0.1:1/geode"
    with pytest.raises(StoreError) as info:
        await open_store(url)
    assert "127.0.0.1:1" in str(info.value)
    assert "TopSecretPw99" not in str(info.value)
    assert "TopSecretPw99" not in repr(info.value)


async def test_migrate_false_requires_a_current_schema(store_url: str) -> None:
    with pytest.raises(StoreError, match="geode db upgrade"):
        await open_store(store_url, migrate=False)
    head = heads()
    assert await upgrade(store_url) == head
    assert await upgrade(store_url) == head  # idempotent
    async with await open_store(store_url, migrate=False) as store:
        sid = await store.sessions.create(mode="headless", model="m")
        assert await store.sessions.exists(sid)


async def test_ping_is_false_when_the_database_is_gone(store: Store) -> None:
    assert await store.ping()
    await store.engine.dispose()
    store.engine = create_async_engine("postgresql+psycopg://u@127.0.0.1:1/x")
    assert not await store.ping()
