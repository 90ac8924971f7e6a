"""Database URLs as the rest of GEODE handles them, without SQLAlchemy: parse one (its
backend and database), put a password in, or show it with the password hidden.

The settings (``[store] password_file``) and ``geode doctor`` use these; only the store
packages import SQLAlchemy. Opening a database (the accepted spellings, the drivers) is
:func:`geode.store.database.open_database`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

__all__ = ["DatabaseURL", "InvalidURLError", "hide_password", "parse_url", "with_password"]


class InvalidURLError(ValueError):
    """A string that is not a database URL (its message says why)."""


@dataclass(frozen=True, kw_only=True)
class DatabaseURL:
    """What a database URL names."""

    #: the dialect: ``"sqlite"``, ``"postgresql"``, ... (the scheme without its driver)
    backend: str
    #: the database: a file path for SQLite, a database name for a server (None: unset)
    database: str | None


def _parsed(url: str) -> URL:
    try:
        return make_url(url)
    except ArgumentError as exc:
        raise InvalidURLError(str(exc)) from exc


def parse_url(url: str) -> DatabaseURL:
    """The backend and database ``url`` names.

    Raises:
        InvalidURLError: ``url`` is not a database URL.
    """
    parsed = _parsed(url)
    return DatabaseURL(backend=parsed.get_backend_name(), database=parsed.database)


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` set (quoted as a URL needs it).

    Raises:
        InvalidURLError: ``url`` is not a database URL.
    """
    return _parsed(url).set(password=password).render_as_string(hide_password=False)


def hide_password(url: str) -> str:
    """``url`` to show: its password, if any, as ``***``.

    Raises:
        InvalidURLError: ``url`` is not a database URL.
    """
    return _parsed(url).render_as_string(hide_password=True)
