"""Statements shared by the channel tables' modules."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from geode.store.database import Database

__all__ = ["dialect_insert", "insert_for", "insert_ignore"]


def insert_ignore(
    store: Database, table: Any, keys: list[str], *, returning: Sequence[str] = ()
) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING`` for the store's dialect (built once per table;
    execute it with a parameter dict rather than ``.values()``, which builds a new one).

    ``returning``: columns the statement returns for a new row (no row: it existed).
    """
    return _insert_ignore_for(store.is_postgres, table, tuple(keys), tuple(returning))


@functools.cache
def _insert_ignore_for(
    postgres: bool, table: Any, keys: tuple[str, ...], returning: tuple[str, ...]
) -> Any:
    stmt = insert_for(postgres)(table).on_conflict_do_nothing(index_elements=list(keys))
    return stmt.returning(*(table.c[name] for name in returning)) if returning else stmt


def dialect_insert(store: Database) -> Any:
    """The store dialect's ``insert`` (the one with ``ON CONFLICT``)."""
    return insert_for(store.is_postgres)


def insert_for(postgres: bool) -> Any:
    """The ``insert`` of PostgreSQL's or SQLite's dialect."""
    # imported by the store that uses it: PostgreSQL's dialect is ~3 MB a SQLite daemon
    # never needs (SQLAlchemy loads the SQLite one when it opens the engine)
    if postgres:
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert
