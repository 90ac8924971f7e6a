"""Wire-level fakes of the search backends, on loopback: Brave's ``GET
/res/v1/web/search``, Tavily's ``POST /search`` and SearXNG's ``GET /search?format=json``.

One :class:`FakeSearch` serves all three shapes; a test sets the rows it answers with
(:attr:`FakeSearch.results`) and reads what was asked (:attr:`FakeSearch.requests`). A
request without the expected key gets 401, as the real services answer.

    async with FakeSearch(key="k") as fake:
        fake.results = [FakeHit("Title", "https://example.org/", "snippet")]
        ...  # [search] provider = "brave", base_url = fake.base_url
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from geode.testing._fakebase import LoopbackFake

__all__ = ["FakeHit", "FakeSearch", "SearchCall"]


@dataclass(frozen=True)
class FakeHit:
    title: str
    url: str
    snippet: str = ""


@dataclass(frozen=True)
class SearchCall:
    """One request the fake received."""

    backend: str
    query: str
    #: the count / max_results asked for (SearXNG has none: 0)
    count: int
    #: the backend's own freshness value ("pw", "week", ...; "" none)
    freshness: str
    #: the key as sent ("" none)
    key: str
    params: dict[str, str] = field(default_factory=dict)


class FakeSearch(LoopbackFake):
    """Brave, Tavily and SearXNG on one loopback port."""

    def __init__(self, *, key: str = "") -> None:
        super().__init__()
        #: the key requests must carry (Brave, Tavily); "" accepts any
        self.key = key
        self.results: list[FakeHit] = []
        self.requests: list[SearchCall] = []
        #: answer every request with this HTTP status instead (an outage, a quota)
        self.status: int | None = None
        #: web pages it also serves, by path (``/pages/NAME``): a result's URL to fetch
        self.pages: dict[str, str] = {}

    def page_url(self, name: str) -> str:
        """The URL of page ``name`` (set its HTML in :attr:`pages` under ``/pages/NAME``)."""
        return f"{self.base_url}pages/{name}"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/res/v1/web/search", self._brave)
        app.router.add_post("/search", self._tavily)
        app.router.add_get("/search", self._searxng)
        app.router.add_get("/pages/{name}", self._page)
        await self._serve(app)

    async def _page(self, request: web.Request) -> web.Response:
        html = self.pages.get(request.path)
        if html is None:
            return web.Response(status=404, text="not here")
        return web.Response(text=html, content_type="text/html")

    def _refuse(self, key: str | None) -> web.Response | None:
        """A refusal (the set status, or 401 for a wrong key), or None; ``key`` None: the
        backend takes no key."""
        if self.status is not None:
            return web.json_response({"error": "fake failure"}, status=self.status)
        if key is not None and self.key and key != self.key:
            return web.json_response({"error": "invalid key"}, status=401)
        return None

    def _record(self, call: SearchCall) -> None:
        self.requests.append(call)
        self._wake()

    async def _brave(self, request: web.Request) -> web.Response:
        key = request.headers.get("X-Subscription-Token", "")
        q = dict(request.query)
        self._record(SearchCall("brave", q.get("q", ""), int(q.get("count", "0") or 0),
                                q.get("freshness", ""), key, q))
        refused = self._refuse(key)
        if refused is not None:
            return refused
        rows = [{"title": h.title, "url": h.url, "description": h.snippet, "type": "search_result"}
                for h in self.results]
        return web.json_response({"type": "search", "query": {"original": q.get("q", "")},
                                  "web": {"type": "search", "results": rows}})

    async def _tavily(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        key = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else ""
        body: Any = await request.json()
        self._record(SearchCall("tavily", str(body.get("query", "")),
                                int(body.get("max_results", 0)), str(body.get("time_range", "")),
                                key, {k: str(v) for k, v in body.items()}))
        refused = self._refuse(key)
        if refused is not None:
            return refused
        rows = [{"title": h.title, "url": h.url, "content": h.snippet, "score": 0.9}
                for h in self.results]
        return web.json_response({"query": body.get("query"), "results": rows,
                                  "response_time": 0.01})

    async def _searxng(self, request: web.Request) -> web.Response:
        q = dict(request.query)
        self._record(SearchCall("searxng", q.get("q", ""), 0, q.get("time_range", ""), "", q))
        if q.get("format") != "json":  # SearXNG refuses a format its settings do not enable
            return web.Response(status=403, text="format not allowed")
        refused = self._refuse(None)
        if refused is not None:
            return refused
        rows = [{"title": h.title, "url": h.url, "content": h.snippet, "engine": "fake"}
                for h in self.results]
        return web.json_response({"query": q.get("q", ""), "number_of_results": len(rows),
                                  "results": rows})
