"""Statements shared by the channel tables' modules."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy.dialects import postgresql, sqlite

if TYPE_CHECKING:
    from geode.store import Store

__all__ = ["insert_ignore"]


def insert_ignore(
    store: Store, table: Any, keys: list[str], *, returning: Sequence[str] = ()
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
    dialect_insert = postgresql.insert if postgres else sqlite.insert
    stmt = dialect_insert(table).on_conflict_do_nothing(index_elements=list(keys))
    return stmt.returning(*(table.c[name] for name in returning)) if returning else stmt
