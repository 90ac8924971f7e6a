"""The attacker's view of the lean model stream (one POST on the runtime's shared aiohttp
session, server-sent events read by our own code instead of the SDK's): a hostile or broken
endpoint must not take the API key to another host, grow our memory without bound, hang a
turn, or get the key into an error's text.

Each endpoint here is a raw aiohttp server on the loopback, so a response can be anything:
a redirect, an event line that never ends, a stall mid-answer, an ``error`` event echoing
the request's headers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from geode.errors import ModelError
from geode.messages import Message, StreamEvent, TextBlock
from geode.providers._clients import ClientCache
from geode.providers._sse import MAX_EVENT_BYTES, sse_events
from geode.providers.anthropic import AnthropicProvider
from geode.providers.base import ModelRequest
from geode.secret_redaction import redact_text, register_secret

KEY = "sk-ant-api03-TODAYattackKEY0123456789abcdefXYZ"
register_secret(KEY)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[str]:
    """A loopback HTTP server answering every path with ``handler``; yields its base URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def lean(base_url: str, *, timeout: float = 10.0) -> AsyncIterator[AnthropicProvider]:
    """The Anthropic adapter as the runtime builds it (streamed calls on the shared
    aiohttp session of a ClientCache)."""
    cache = ClientCache()
    provider = AnthropicProvider(
        api_key=KEY, base_url=base_url, timeout=timeout,
        client=cache.anthropic(api_key=KEY, base_url=base_url, timeout=timeout), http=cache)
    try:
        yield provider
    finally:
        await provider.aclose()
        await cache.aclose()


def request() -> ModelRequest:
    return ModelRequest(model="claude-test", system="s",
                        messages=[Message(role="user", content=[TextBlock(text="hi")])],
                        max_tokens=64)


async def failure(provider: AnthropicProvider) -> ModelError:
    events: list[StreamEvent] = []
    with pytest.raises(ModelError) as info:
        async for e in provider.stream(request()):
            events.append(e)
    return info.value


def sse(event: str, **data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps({'type': event, **data})}\n\n".encode()


START = sse("message_start", message={
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
    "content": [], "stop_reason": None, "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 1}})
TEXT = (sse("content_block_start", index=0, content_block={"type": "text", "text": ""})
        + sse("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hello"}))
END = (sse("content_block_stop", index=0)
       + sse("message_delta", delta={"stop_reason": "end_turn", "stop_sequence": None},
             usage={"output_tokens": 2})
       + sse("message_stop"))


async def streaming(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    return resp


# --- a redirect never takes the key to another host ---------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_to_another_host_does_not_carry_the_api_key(status: int) -> None:
    """Followed as the SDK's httpx client follows it, but no credential header goes along:
    httpx and aiohttp drop only ``Authorization``, and Anthropic's key is ``x-api-key``."""
    seen: list[dict[str, str]] = []

    async def elsewhere(req: web.Request) -> web.StreamResponse:
        seen.append(dict(req.headers))
        resp = await streaming(req)
        await resp.write(START + TEXT + END)
        return resp

    async with serve(elsewhere) as evil:
        async def redirect(req: web.Request) -> web.StreamResponse:
            return web.Response(status=status, headers={"Location": f"{evil}/v1/messages"})

        async with serve(redirect) as api, lean(api) as provider:
            events = [e async for e in provider.stream(request())]
    assert events[-1].kind == "done"
    assert len(seen) == 1
    assert KEY not in json.dumps(seen[0]), f"the key followed the redirect: {seen[0]}"
    assert not {k.lower() for k in seen[0]} & {"x-api-key", "authorization", "api-key"}


@pytest.mark.parametrize("header", ["x-api-key", "api-key", "X-Goog-Api-Key", "Cookie"])
async def test_a_redirect_to_another_origin_drops_every_credential_header(header: str) -> None:
    """The lean POST with the credential under another name than ``Authorization`` (the
    Messages API's ``x-api-key``, Azure's ``api-key``): aiohttp alone would carry it."""
    from geode.providers._sse import LeanEndpoint

    seen: list[dict[str, str]] = []

    async def elsewhere(req: web.Request) -> web.StreamResponse:
        seen.append(dict(req.headers))
        return web.json_response({"ok": True})

    async with serve(elsewhere) as evil:
        async def redirect(req: web.Request) -> web.StreamResponse:
            return web.Response(status=307, headers={"Location": f"{evil}/v1/messages"})

        async with serve(redirect) as api:
            cache = ClientCache()
            try:
                endpoint = LeanEndpoint.of(cache, url=f"{api}/v1/messages", timeout=5.0,
                                           headers={header: KEY, "x-other": "kept"})
                async with endpoint.post(b"{}") as resp:
                    assert resp.status == 200
            finally:
                await cache.aclose()
    assert len(seen) == 1 and seen[0].get("x-other") == "kept"
    assert KEY not in json.dumps(seen[0]), f"{header} followed the redirect"


async def test_a_redirect_on_the_same_origin_keeps_the_key_and_a_loop_ends() -> None:
    seen: list[str] = []

    async def moved(req: web.Request) -> web.StreamResponse:
        if req.path != "/v2/messages":
            return web.Response(status=308, headers={"Location": "/v2/messages"})
        seen.append(json.dumps(dict(req.headers)))
        resp = await streaming(req)
        await resp.write(START + TEXT + END)
        return resp

    async with serve(moved) as api, lean(api) as provider:
        events = [e async for e in provider.stream(request())]
    assert events[-1].kind == "done" and len(seen) == 1 and KEY in seen[0]

    async def loops(req: web.Request) -> web.StreamResponse:
        return web.Response(status=307, headers={"Location": "/again"})

    async with serve(loops) as api, lean(api) as provider:
        err = await asyncio.wait_for(failure(provider), 30)
    assert err.kind == "transient"


# --- memory: an event that never ends -----------------------------------------------------


class _Reader:
    """A stand-in for ``aiohttp.StreamReader``: ``iter_any`` yields the given pieces and
    counts how many bytes were taken."""

    def __init__(self, pieces: Callable[[], Any]) -> None:
        self._pieces = pieces
        self.taken = 0

    async def iter_any(self) -> AsyncIterator[bytes]:
        for piece in self._pieces():
            self.taken += len(piece)
            yield piece


async def _read_all(reader: _Reader) -> list[tuple[str, str]]:
    return [e async for e in sse_events(reader)]  # type: ignore[arg-type]


async def test_a_line_without_a_newline_is_cut_off_not_grown_forever() -> None:
    mib = b"x" * (1 << 20)
    total = MAX_EVENT_BYTES + (8 << 20)
    reader = _Reader(lambda: [b"data: ", *([mib] * (total >> 20))])
    with pytest.raises(ValueError):
        await _read_all(reader)
    assert reader.taken <= MAX_EVENT_BYTES + (2 << 20)


async def test_an_event_of_endless_data_lines_is_cut_off_too() -> None:
    line = b"data: " + b"y" * (64 << 10) + b"\n"  # never the blank line that ends it
    total = MAX_EVENT_BYTES + (8 << 20)
    reader = _Reader(lambda: [line] * (total // len(line)))
    with pytest.raises(ValueError):
        await _read_all(reader)
    assert reader.taken <= MAX_EVENT_BYTES + (2 << 20)


async def test_events_below_the_bound_are_read_whatever_their_pieces() -> None:
    body = (START + TEXT + END).replace(b"\n", b"\r\n")
    for size in (1, 2, 3, 7, 64):
        pieces = [body[i:i + size] for i in range(0, len(body), size)]
        events = await _read_all(_Reader(lambda p=pieces: p))  # type: ignore[misc]
        assert [n for n, _ in events][-1] == "message_stop" and len(events) == 6


async def test_an_endless_event_from_a_server_is_a_transient_failure() -> None:
    async def endless(req: web.Request) -> web.StreamResponse:
        resp = await streaming(req)
        await resp.write(START + b"data: ")
        chunk = b"z" * (1 << 20)
        try:
            for _ in range((MAX_EVENT_BYTES >> 20) + 64):
                await resp.write(chunk)
        except (ConnectionError, asyncio.CancelledError):
            pass
        return resp

    async with serve(endless) as api, lean(api) as provider:
        err = await failure(provider)
    assert err.kind == "transient"


async def test_bytes_that_are_not_utf8_are_a_transient_failure() -> None:
    async def garbled(req: web.Request) -> web.StreamResponse:
        resp = await streaming(req)
        await resp.write(START + b"event: content_block_delta\ndata: \xff\xfe{\n\n")
        return resp

    async with serve(garbled) as api, lean(api) as provider:
        err = await failure(provider)
    assert err.kind == "transient"


# --- a stall mid-answer -------------------------------------------------------------------


async def test_a_server_that_stalls_mid_stream_is_a_transient_timeout_not_a_hang() -> None:
    release = asyncio.Event()

    async def stalls(req: web.Request) -> web.StreamResponse:
        resp = await streaming(req)
        await resp.write(START + TEXT)
        await release.wait()
        return resp

    async with serve(stalls) as api, lean(api, timeout=0.5) as provider:
        try:
            err = await asyncio.wait_for(failure(provider), 10)
        finally:
            release.set()
    assert err.kind == "transient" and "timed out" in str(err)


# --- the key in an error's text -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["invalid_request_error", "api_error", "overloaded_error",
                                  "authentication_error"])
async def test_an_error_event_echoing_the_key_is_masked_where_it_is_shown(kind: str) -> None:
    async def echoes(req: web.Request) -> web.StreamResponse:
        resp = await streaming(req)
        text = (f"bad request: x-api-key={req.headers.get('x-api-key')} "
                f"Authorization: Bearer {req.headers.get('x-api-key')}")
        await resp.write(START + sse("error", error={"type": kind, "message": text}))
        return resp

    async with serve(echoes) as api, lean(api) as provider:
        err = await failure(provider)
    if kind == "authentication_error":  # the vendor's text is left out altogether
        assert KEY not in str(err)
    # every boundary (log, timeline, ledger, channel reply) masks it
    assert KEY not in redact_text(str(err)) and KEY[:16] not in redact_text(str(err))


async def test_the_api_key_is_never_logged_at_debug_level() -> None:
    import io
    import logging
    import sys

    import structlog

    from geode.logging import configure_logging

    out = io.StringIO()
    configure_logging(level="DEBUG", stream=out)
    try:
        async def ok(req: web.Request) -> web.StreamResponse:
            resp = await streaming(req)
            await resp.write(START + TEXT + END)
            return resp

        async with serve(ok) as api, lean(api) as provider:
            events = [e async for e in provider.stream(request())]
        assert events[-1].kind == "done"
        structlog.get_logger("t").debug("probe", headers={"x-api-key": KEY})
        logging.getLogger("aiohttp.client").debug("headers %s", {"x-api-key": KEY})
    finally:
        configure_logging(stream=sys.stderr)
    assert "probe" in out.getvalue() and "headers" in out.getvalue()
    assert KEY not in out.getvalue()


# --- proxies from the environment, as the SDK honours them --------------------------------


def test_proxies_from_the_environment_are_honoured_and_no_proxy_bypasses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://user:pw@proxy.example:3128")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example,127.0.0.1")
    for name in ("https_proxy", "http_proxy", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    cache = ClientCache()
    proxy, auth = cache.proxy_for("https://api.anthropic.com/v1/messages")
    assert proxy is not None and "proxy.example:3128" in proxy
    assert auth is not None and auth.login == "user"
    assert cache.proxy_for("https://internal.example/v1/messages") == (None, None)
    assert cache.proxy_for("http://127.0.0.1:9/v1/messages") == (None, None)


# --- a key cut by an error text's length limit ---------------------------------------------

#: a registered key of no known shape (an OpenAI-compatible endpoint's, say): only its
#: whole value is masked, so a cut that keeps its start must not come before the mask
PLAIN_KEY = "QqplainKEYnoShape7Qx2Lm9Vb4Nc8Zr"
register_secret(PLAIN_KEY)


@pytest.mark.parametrize("at", [280, 290, 295])
def test_a_transport_or_malformed_error_masks_before_it_cuts(at: int) -> None:
    from geode.providers._sse import malformed_error, transport_error

    for make in (transport_error, malformed_error):
        prefix = f"anthropic: {'connection failed or dropped' if make is transport_error else 'malformed or interrupted response'} (ValueError: "  # noqa: E501
        text = "x" * (at - len(prefix)) + PLAIN_KEY
        err = make("anthropic", ValueError(text))
        assert PLAIN_KEY[:4] not in str(err), str(err)


async def test_an_error_event_whose_key_the_length_limit_cuts_shows_none_of_it() -> None:
    async def echoes(req: web.Request) -> web.StreamResponse:
        resp = await streaming(req)
        text = "bad request: " + "x" * (295 - len("bad request: ")) + PLAIN_KEY
        await resp.write(START + sse("error", error={"type": "api_error", "message": text}))
        return resp

    async with serve(echoes) as api, lean(api) as provider:
        err = await failure(provider)
    assert PLAIN_KEY[:5] not in redact_text(str(err)), str(err)


async def test_a_non_object_event_whose_key_the_80_character_cut_splits_shows_none() -> None:
    async def echoes(req: web.Request) -> web.StreamResponse:
        resp = await streaming(req)
        data = '["' + "y" * (80 - 2 - 5) + PLAIN_KEY + '"]'  # the cut keeps 5 of it
        await resp.write(START + f"event: content_block_delta\ndata: {data}\n\n".encode())
        return resp

    async with serve(echoes) as api, lean(api) as provider:
        err = await failure(provider)
    assert err.kind == "transient"
    assert PLAIN_KEY[:4] not in redact_text(str(err)), str(err)


async def test_a_server_that_never_answers_its_headers_is_a_transient_timeout() -> None:
    release = asyncio.Event()

    async def silent(req: web.Request) -> web.StreamResponse:
        await release.wait()
        return web.Response(status=200)

    async with serve(silent) as api, lean(api, timeout=0.5) as provider:
        try:
            err = await asyncio.wait_for(failure(provider), 10)
        finally:
            release.set()
    assert err.kind == "transient" and "timed out" in str(err)


@pytest.mark.parametrize("location", ["ftp://127.0.0.1/x", "file:///etc/passwd",
                                      "http://[::1", "//"])
async def test_a_redirect_to_a_strange_place_is_a_failure_not_a_crash(location: str) -> None:
    async def redirect(req: web.Request) -> web.StreamResponse:
        return web.Response(status=307, headers={"Location": location})

    async with serve(redirect) as api, lean(api, timeout=2.0) as provider:
        err = await asyncio.wait_for(failure(provider), 20)
    assert isinstance(err, ModelError) and KEY not in str(err)


def test_the_thread_s_failure_line_masks_before_it_cuts() -> None:
    """A turn's failure detail, cut to 300 characters for the thread's "I could not finish"
    line: the cut falls inside a registered key of no known shape and none of it shows."""
    from bots.turn.run import friendly_failure
    from geode.loop import TurnResult
    from geode.loop.termination import TerminationReason

    key = "Qfailkey" + "x" * 40
    register_secret(key)
    result = TurnResult(session_id="s", turn_id="t", termination=TerminationReason.MODEL_ERROR,
                        text="", rounds=1, detail="e" * 290 + key)
    line = friendly_failure(result)
    assert "Qfail" not in line and "could not finish" in line
