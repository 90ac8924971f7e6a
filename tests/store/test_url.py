"""Database URLs without SQLAlchemy outside the store: parse, set a password, hide it."""

from __future__ import annotations

import pytest

from geode.store.url import DatabaseURL, InvalidURLError, hide_password, parse_url, with_password


def test_a_url_names_its_backend_and_database_whatever_the_driver() -> None:
    assert parse_url("sqlite:////var/lib/geode/geode.db") == DatabaseURL(
        backend="sqlite", database="/var/lib/geode/geode.db")
    assert parse_url("postgresql+psycopg://geode@db:5432/geode") == DatabaseURL(
        backend="postgresql", database="geode")
    assert parse_url("postgresql://db").database is None


def test_a_password_is_set_quoted_and_shown_hidden() -> None:
    url = with_password("postgresql+psycopg://geode@db/geode", "p@ss:w/rd")
    assert url == "postgresql+psycopg://geode:p%40ss%3Aw%2Frd@db/geode"
    assert hide_password(url) == "postgresql+psycopg://geode:***@db/geode"
    assert hide_password("sqlite:///x.db") == "sqlite:///x.db"


@pytest.mark.parametrize("call", [parse_url, hide_password,
                                  lambda url: with_password(url, "pw")])
def test_what_is_not_a_database_url_says_so_as_a_value_error(call: object) -> None:
    with pytest.raises(InvalidURLError, match="Could not parse") as caught:
        call("not-a-url")  # type: ignore[operator]
    assert isinstance(caught.value, ValueError)
