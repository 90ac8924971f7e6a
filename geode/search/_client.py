"""One configured search backend with its key: sends a query, returns bounded rows.

The key travels only in the request the backend builds (a header or the body); it is never
part of a message, a log line or a result. A failure is a :class:`SearchError` that says
what went wrong without the request's headers."""

from __future__ import annotations

import structlog

from geode.errors import RunError
from geode.search._spec import SearchBackendSpec, SearchHit, SearchQuery

__all__ = ["SearchError", "WebSearchClient"]

log = structlog.get_logger(__name__)

#: the largest answer read from a backend (a JSON list of a few results is far smaller)
MAX_ANSWER_BYTES = 2 * 1024 * 1024


class SearchError(RunError):
    """A search could not be answered (backend down, refused the key, sent no JSON)."""


class WebSearchClient:
    """The session's way to search (``ctx.deps.search``)."""

    def __init__(self, *, spec: SearchBackendSpec, base_url: str, key: str | None,
                 timeout_s: float = 15.0, max_results: int = 10) -> None:
        self.spec = spec
        self.base_url = base_url.rstrip("/") + "/"
        self._key = key
        self.timeout_s = timeout_s
        self.max_results = max_results

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:  # never the key
        return f"WebSearchClient({self.spec.name!r}, {self.base_url!r})"

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        """The backend's results for ``query``, at most ``query.count`` of them."""
        import httpx

        if self.spec.key_env and not self._key:
            raise SearchError(f"web search ({self.spec.name}) has no API key: the operator "
                              f"sets {self.spec.key_env} in the environment or "
                              "$GEODE_HOME/.env")
        count = max(1, min(query.count, self.max_results))
        query = SearchQuery(text=query.text, count=count, freshness=query.freshness)
        req = self.spec.build(query, self._key)
        url = self.base_url + req.path.lstrip("/")
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, follow_redirects=False) as c:
                resp = await c.request(req.method, url, params=dict(req.params),
                                       json=dict(req.json) if req.json is not None else None,
                                       headers=dict(req.headers))
        except httpx.HTTPError as exc:
            raise SearchError(f"web search ({self.spec.name}) failed: "
                              f"{type(exc).__name__}") from None
        if resp.status_code in (401, 403):
            raise SearchError(f"web search ({self.spec.name}) refused the API key "
                              f"(HTTP {resp.status_code})")
        if resp.status_code == 429:
            raise SearchError(f"web search ({self.spec.name}) is rate limited (HTTP 429); "
                              "try again later")
        if resp.status_code >= 400:
            raise SearchError(f"web search ({self.spec.name}) answered HTTP "
                              f"{resp.status_code}")
        if len(resp.content) > MAX_ANSWER_BYTES:
            raise SearchError(f"web search ({self.spec.name}) answered more than "
                              f"{MAX_ANSWER_BYTES} bytes")
        try:
            payload = resp.json()
        except ValueError:
            raise SearchError(f"web search ({self.spec.name}) did not answer JSON") from None
        hits = [h for h in self.spec.parse(payload) if h.url]
        log.debug("web_search.answered", backend=self.spec.name, results=len(hits))
        return hits[:count]
