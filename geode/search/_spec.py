"""What a search backend is: how one query becomes one HTTP request, and how the answer
becomes result rows. A backend names no client and holds no key: the session's
:class:`~geode.search.WebSearchClient` sends the request with the key it was given."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["FRESHNESS", "Freshness", "SearchBackendSpec", "SearchHit", "SearchQuery",
           "SearchRequest"]

#: how recent the results must be ("any": no bound)
Freshness = Literal["any", "day", "week", "month", "year"]
FRESHNESS: tuple[Freshness, ...] = ("any", "day", "week", "month", "year")


@dataclass(frozen=True, kw_only=True)
class SearchQuery:
    """One query as the tool bounded it."""

    text: str
    count: int
    freshness: Freshness = "any"


@dataclass(frozen=True, kw_only=True)
class SearchRequest:
    """The HTTP request of one query (relative to the backend's base URL)."""

    method: Literal["GET", "POST"]
    path: str
    params: Mapping[str, str] = field(default_factory=dict)
    json: Mapping[str, Any] | None = None
    #: headers that carry the key are built here and never logged or shown
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class SearchHit:
    """One result: what the model is shown of it."""

    title: str
    url: str
    snippet: str = ""
    #: the backend's own age or date of the page, when it gives one
    age: str = ""


@dataclass(frozen=True, kw_only=True)
class SearchBackendSpec:
    """A search backend, registered by name (``[search] provider``).

    Attributes:
        name: the provider name in config.toml.
        default_base_url: used when ``[search] base_url`` is empty; "" means the operator
            must give one (a self-hosted service).
        key_env: the environment variable holding its API key ("" none needed).
        build: the request of a query, given the key (None when ``key_env`` is "").
        parse: the result rows of a decoded JSON answer (at most the query's count are
            kept by the caller).
    """

    name: str
    default_base_url: str
    key_env: str
    build: Callable[[SearchQuery, str | None], SearchRequest]
    parse: Callable[[Any], list[SearchHit]]


def text_of(value: Any, limit: int = 500) -> str:
    """A field of a backend's answer as one line of at most ``limit`` characters."""
    if not isinstance(value, str):
        return ""
    line = " ".join(value.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
