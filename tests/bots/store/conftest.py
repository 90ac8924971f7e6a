"""The bots' record stores are tested like geode's: on SQLite and on PostgreSQL (a fresh schema
per test), with the fixtures of tests/store/conftest.py."""

from tests.store.conftest import pg_url, sqlite_url, store, store_url

__all__ = ["pg_url", "sqlite_url", "store", "store_url"]
