"""The store fixtures (SQLite and PostgreSQL) of tests/store, for the memory tests."""

from tests.store.conftest import pg_url, sqlite_url, store, store_url

__all__ = ["pg_url", "sqlite_url", "store", "store_url"]
