"""The Chat Completions adapter as a runtime builds it: a call, streamed or not, is one POST
on the cache's shared aiohttp session (never the SDK's request path), with the SDK client's
headers and bearer key (the stream's chunk shapes: ``test_prov_lean_stream.py``). The adapter
and error tests run this path too (the ``openai-lean`` harness)."""

from __future__ import annotations

from typing import Any

import pytest
from prov_helpers import API_KEY, make_provider, make_request

from geode.providers.openai_compat import OpenAICompatProvider
from geode.testing.fake_openai import FakeOpenAIServer
from geode.testing.loopback import serve_app


async def test_a_call_is_one_post_with_the_sdks_headers_and_no_sdk_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeOpenAIServer() as srv:
        provider = make_provider("openai", srv, lean=True)
        assert isinstance(provider, OpenAICompatProvider)

        async def no_sdk(*_a: Any, **_kw: Any) -> Any:
            raise AssertionError("the SDK's request path was used")

        monkeypatch.setattr(provider._client, "post", no_sdk)
        try:
            for i in range(3):
                srv.enqueue_text(f"ok {i}")
                response = await provider.complete(make_request())
                assert response.message.text == f"ok {i}"
                assert response.stop_reason == "end_turn"
        finally:
            await provider.aclose()
        req = srv.generate_requests[-1]
        assert req.path == "/v1/chat/completions"
        assert req.headers["authorization"] == f"Bearer {API_KEY}"
        assert req.headers["user-agent"].startswith("AsyncOpenAI/Python")
        assert req.headers["content-type"] == "application/json"
        assert req.body["messages"][-1] == {"role": "user", "content": "hi"}
        assert len(srv.connections) == 1  # one pooled connection for the three calls


async def test_a_streamed_call_is_one_post_too_and_no_sdk_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with FakeOpenAIServer() as srv:
        provider = make_provider("openai", srv, lean=True)
        srv.enqueue_text("streamed")

        async def no_sdk(*_a: Any, **_kw: Any) -> Any:
            raise AssertionError("the SDK's request path was used")

        monkeypatch.setattr(provider._client, "post", no_sdk)
        try:
            events = [ev async for ev in provider.stream(make_request())]
        finally:
            await provider.aclose()
        assert events[-1].kind == "done" and events[-1].response is not None
        assert events[-1].response.message.text == "streamed"


async def test_the_environments_proxy_is_looked_up_once_and_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import aiohttp.helpers

    from geode.errors import ModelError

    lookups: list[str] = []
    real = aiohttp.helpers.get_env_proxy_for_url

    def counted(url: Any) -> Any:
        lookups.append(str(url))
        return real(url)

    monkeypatch.setattr(aiohttp.helpers, "get_env_proxy_for_url", counted)
    for var in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    async with FakeOpenAIServer() as srv:
        provider = make_provider("openai", srv, lean=True)
        try:
            with pytest.raises(ModelError) as info:
                await provider.complete(make_request())
            assert info.value.kind == "transient"  # the proxy was used (and refused)
            assert srv.generate_requests == []
        finally:
            await provider.aclose()
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        provider = make_provider("openai", srv, lean=True)
        try:
            for _ in range(2):
                srv.enqueue_text("direct")
                assert (await provider.complete(make_request())).message.text == "direct"
        finally:
            await provider.aclose()
    assert len(lookups) == 2  # once per cache and URL, not per request


async def test_the_shared_session_allows_as_many_connections_as_the_sdks() -> None:
    import openai._constants

    from geode.providers._clients import ClientCache

    cache = ClientCache()
    try:
        connector = cache.http().connector
        assert connector is not None
        assert connector.limit == openai._constants.DEFAULT_CONNECTION_LIMITS.max_connections
    finally:
        await cache.aclose()


async def test_a_redirect_to_another_origin_never_carries_the_key() -> None:
    """A hostile or hijacked endpoint answers 307 to a server of its own: the lean POST
    follows it (as the SDK's httpx client does) but the bearer key stays behind."""
    from types import SimpleNamespace

    from aiohttp import web

    async with FakeOpenAIServer() as other:
        async def redirect(request: web.Request) -> web.Response:
            raise web.HTTPTemporaryRedirect(f"{other.base_url}/chat/completions")

        app = web.Application()
        app.router.add_post("/v1/chat/completions", redirect)
        async with serve_app(app) as port:
            redirector: Any = SimpleNamespace(base_url=f"http://127.0.0.1:{port}/v1")
            provider = make_provider("openai", redirector, lean=True)
            other.enqueue_text("answered elsewhere")
            try:
                response = await provider.complete(make_request())
            finally:
                await provider.aclose()
        assert response.message.text == "answered elsewhere"
        req = other.generate_requests[-1]
        assert "authorization" not in req.headers
        assert API_KEY not in str(dict(req.headers))
