"""The lean streamed Chat Completions call (one POST on the runtime's shared aiohttp session,
each server-sent event one ``json.loads``): the chunk shapes a server may send, byte for
byte, and what the adapter makes of them: text, tool-call argument fragments, usage in a
chunk without choices, SSE comments and fields, CRLF line ends, an event's data on many
lines, an error object mid-stream, a malformed chunk, a cut stream, and a retry after one."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from prov_helpers import make_provider, make_request

from geode.errors import ModelError
from geode.messages import StreamEvent
from geode.providers.retry import RetryPolicy, call_with_retry
from geode.testing.loopback import serve_app

Frames = list[bytes]


def chunk(delta: dict[str, Any] | None = None, *, finish: str | None = None,
          usage: dict[str, int] | None = None, choices: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "created": 1,
                            "model": "served-model", "choices": []}
    if choices:
        body["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    if usage is not None:
        body["usage"] = usage
    return body


def data(obj: Any) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


async def stream_of(frames: Callable[[], Frames]) -> AsyncIterator[Any]:
    """An endpoint answering each POST with ``frames()`` written one by one."""
    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for frame in frames():
            await resp.write(frame)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    async with serve_app(app) as port:
        server: Any = SimpleNamespace(base_url=f"http://127.0.0.1:{port}/v1")
        provider = make_provider("openai", server, lean=True)
        try:
            yield provider
        finally:
            await provider.aclose()


async def events(frames: Frames) -> list[StreamEvent]:
    async for provider in stream_of(lambda: frames):
        return [e async for e in provider.stream(make_request())]
    raise AssertionError("unreachable")


async def failure(frames: Frames) -> ModelError:
    with pytest.raises(ModelError) as info:
        await events(frames)
    return info.value


async def test_text_deltas_and_usage_in_a_chunk_without_choices() -> None:
    got = await events([
        data(chunk({"role": "assistant", "content": ""})),
        data(chunk({"content": "Hello"})),
        data(chunk({"content": ", world"})),
        data(chunk(finish="stop")),
        data(chunk(usage={"prompt_tokens": 12, "completion_tokens": 3}, choices=False)),
        b"data: [DONE]\n\n",
    ])
    assert [(e.kind, e.text) for e in got[:-1]] == [("text_delta", "Hello"),
                                                    ("text_delta", ", world")]
    done = got[-1]
    assert done.kind == "done" and done.response is not None
    assert done.response.message.text == "Hello, world"
    assert done.response.stop_reason == "end_turn"
    assert done.response.model == "served-model"
    assert (done.response.usage.input_tokens, done.response.usage.output_tokens) == (12, 3)


async def test_tool_call_arguments_in_fragments_and_parallel_calls() -> None:
    def call(index: int, **fields: Any) -> dict[str, Any]:
        return chunk({"tool_calls": [{"index": index, **fields}]})

    got = await events([
        data(call(0, id="call_a", type="function",
                  function={"name": "read_file", "arguments": ""})),
        data(call(1, id="call_b", type="function", function={"name": "search"})),
        data(call(0, function={"arguments": '{"pa'})),
        data(call(1, function={"arguments": '{"q": "x"}'})),
        data(call(0, function={"arguments": 'th": "a.txt"}'})),
        data(chunk(finish="tool_calls")),
        b"data: [DONE]\n\n",
    ])
    assert [(e.kind, e.tool_name) for e in got[:-1]] == [("tool_use_start", "read_file"),
                                                         ("tool_use_start", "search")]
    response = got[-1].response
    assert response is not None and response.stop_reason == "tool_use"
    uses = response.message.tool_uses
    assert [(u.id, u.name, u.input) for u in uses] == [
        ("call_a", "read_file", {"path": "a.txt"}), ("call_b", "search", {"q": "x"})]


async def test_sse_comments_fields_crlf_and_data_on_many_lines() -> None:
    lines = json.dumps(chunk({"content": "two"}), indent=1).split("\n")
    many = "".join(f"data: {line}\n" if i % 2 else f"data:{line}\n"
                   for i, line in enumerate(lines))
    got = await events([
        b": keep-alive comment\n\n",
        b"event: message\r\nid: 7\r\n" + data(chunk({"content": "one "})).replace(b"\n", b"\r\n"),
        f"{many}\n".encode(),
        b"retry: 1000\n\n",
        data(chunk(finish="stop")),
        b"data: [DONE]\n\n",
    ])
    assert [e.text for e in got if e.kind == "text_delta"] == ["one ", "two"]
    assert got[-1].response is not None and got[-1].response.message.text == "one two"


async def test_a_chunk_split_across_writes_is_read_whole() -> None:
    frame = data(chunk({"content": "split"}))
    got = await events([frame[:10], frame[10:25], frame[25:], data(chunk(finish="stop"))])
    assert got[-1].response is not None and got[-1].response.message.text == "split"


async def test_an_error_object_mid_stream_is_classified_by_its_code() -> None:
    err = await failure([
        data(chunk({"content": "partial"})),
        data({"error": {"message": "slow down", "type": "rate_limit_error"}}),
    ])
    assert err.kind == "rate_limit"
    assert "slow down" in str(err)
    upstream = await failure([data({"error": {"message": "upstream", "code": 502}})])
    assert upstream.kind == "transient" and upstream.status_code == 502


async def test_a_malformed_chunk_and_a_cut_stream_are_transient() -> None:
    malformed = await failure([data(chunk({"content": "a"})), b"data: {not json\n\n"])
    assert malformed.kind == "transient" and "malformed" in str(malformed)
    not_object = await failure([b"data: [1, 2]\n\n"])
    assert not_object.kind == "transient"
    cut = await failure([data(chunk({"content": "a"}))])  # no finish_reason
    assert cut.kind == "transient" and "finish_reason" in str(cut)


async def test_a_status_error_before_the_stream_is_classified() -> None:
    async def handle(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "maximum context length exceeded",
                                            "code": "context_length_exceeded"}}, status=400)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    async with serve_app(app) as port:
        server: Any = SimpleNamespace(base_url=f"http://127.0.0.1:{port}/v1")
        provider = make_provider("openai", server, lean=True)
        try:
            with pytest.raises(ModelError) as info:
                async for _ in provider.stream(make_request()):
                    pass
        finally:
            await provider.aclose()
    assert info.value.kind == "context_overflow" and info.value.status_code == 400


async def test_a_stream_cut_then_retried_gives_the_second_answer_whole() -> None:
    answers = iter([
        [data(chunk({"content": "cut"}))],
        [data(chunk({"content": "whole "})), data(chunk({"content": "answer"})),
         data(chunk(finish="stop"))],
    ])
    seen: list[list[str]] = []
    async for provider in stream_of(lambda: next(answers)):
        async def once(p: Any = provider) -> Any:
            texts: list[str] = []
            seen.append(texts)
            async for ev in p.stream(make_request()):
                if ev.kind == "text_delta":
                    texts.append(ev.text)
                elif ev.kind == "done":
                    return ev.response
            raise AssertionError("no done event")

        async def no_sleep(_delay: float) -> None:
            return None

        response = await call_with_retry(once, policy=RetryPolicy(max_attempts=2),
                                         sleep=no_sleep)
    assert seen == [["cut"], ["whole ", "answer"]]
    assert response.message.text == "whole answer"
