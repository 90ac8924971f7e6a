"""A SearXNG instance's JSON API (``GET /search?format=json``); self-hosted, so it has no
default address (``[search] base_url``) and no key. The instance must allow the ``json``
format (``search.formats`` in its settings.yml)."""

from __future__ import annotations

from typing import Any

from geode.search._spec import SearchBackendSpec, SearchHit, SearchQuery, SearchRequest, text_of

__all__ = ["SPEC"]


def _build(query: SearchQuery, key: str | None) -> SearchRequest:
    params = {"q": query.text, "format": "json", "safesearch": "1"}
    if query.freshness != "any":
        params["time_range"] = query.freshness
    return SearchRequest(method="GET", path="search", params=params,
                         headers={"Accept": "application/json"})


def _parse(payload: Any) -> list[SearchHit]:
    rows = payload.get("results") if isinstance(payload, dict) else None
    return [SearchHit(title=text_of(r.get("title")), url=text_of(r.get("url"), 2000),
                      snippet=text_of(r.get("content")),
                      age=text_of(r.get("publishedDate"), 40))
            for r in rows or () if isinstance(r, dict)]


SPEC = SearchBackendSpec(name="searxng", default_base_url="", key_env="", build=_build,
                         parse=_parse)
