"""Tavily Search API (``POST /search``; key as a bearer token)."""

from __future__ import annotations

from typing import Any

from geode.search._spec import SearchBackendSpec, SearchHit, SearchQuery, SearchRequest, text_of

__all__ = ["SPEC"]


def _build(query: SearchQuery, key: str | None) -> SearchRequest:
    body: dict[str, Any] = {"query": query.text, "max_results": query.count,
                            "topic": "general", "search_depth": "basic"}
    if query.freshness != "any":
        body["time_range"] = query.freshness
    return SearchRequest(method="POST", path="search", json=body,
                         headers={"Authorization": f"Bearer {key or ''}"})


def _parse(payload: Any) -> list[SearchHit]:
    rows = payload.get("results") if isinstance(payload, dict) else None
    return [SearchHit(title=text_of(r.get("title")), url=text_of(r.get("url"), 2000),
                      snippet=text_of(r.get("content")),
                      age=text_of(r.get("published_date"), 40))
            for r in rows or () if isinstance(r, dict)]


SPEC = SearchBackendSpec(name="tavily", default_base_url="https://api.tavily.com/",
                         key_env="TAVILY_API_KEY", build=_build, parse=_parse)
