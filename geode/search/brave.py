"""Brave Search API (``GET /res/v1/web/search``; key in ``X-Subscription-Token``)."""

from __future__ import annotations

from typing import Any

from geode.search._spec import SearchBackendSpec, SearchHit, SearchQuery, SearchRequest, text_of

__all__ = ["SPEC"]

_FRESHNESS = {"day": "pd", "week": "pw", "month": "pm", "year": "py"}


def _build(query: SearchQuery, key: str | None) -> SearchRequest:
    params = {"q": query.text, "count": str(query.count)}
    if query.freshness in _FRESHNESS:
        params["freshness"] = _FRESHNESS[query.freshness]
    return SearchRequest(method="GET", path="res/v1/web/search", params=params,
                         headers={"Accept": "application/json",
                                  "X-Subscription-Token": key or ""})


def _parse(payload: Any) -> list[SearchHit]:
    web = payload.get("web") if isinstance(payload, dict) else None
    rows = web.get("results") if isinstance(web, dict) else None
    return [SearchHit(title=text_of(r.get("title")), url=text_of(r.get("url"), 2000),
                      snippet=text_of(r.get("description")), age=text_of(r.get("age"), 40))
            for r in rows or () if isinstance(r, dict)]


SPEC = SearchBackendSpec(name="brave", default_base_url="https://api.search.brave.com/",
                         key_env="BRAVE_API_KEY", build=_build, parse=_parse)
