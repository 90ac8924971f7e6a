"""Fixtures for the store tests: every SQL test runs on SQLite and on PostgreSQL.

PostgreSQL comes from GEODE_TEST_PG_URL. Each PG test gets its own schema (search_path in
the URL) and drops it afterwards, so tests run in any order and in parallel. Without the
variable the PG variants are skipped locally; under CI=true that is a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from sqlalchemy.engine import make_url

from geode.store import Store, open_store

PG_URL = os.environ.get("GEODE_TEST_PG_URL", "")


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def pg_base_url() -> str:
    if not PG_URL:
        if os.environ.get("CI") == "true":
            pytest.fail("GEODE_TEST_PG_URL is not set under CI=true: the PostgreSQL tests must run")
        pytest.skip("GEODE_TEST_PG_URL not set (set it to run the PostgreSQL variants)")
    return PG_URL


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema, dropped after the test."""
    base = pg_base_url()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq(base), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in base else "?"
    try:
        yield f"{base}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(_libpq(base), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'home' / 'geode.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'home' / 'geode.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    s = await open_store(store_url)
    try:
        yield s
    finally:
        await s.aclose()
