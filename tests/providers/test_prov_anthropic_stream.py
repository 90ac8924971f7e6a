"""The lean streamed Messages call (one POST on the runtime's shared aiohttp session, each
server-sent event one ``json.loads``) against the wire-level Anthropic fake: the same events
and the same final response as the SDK's ``messages.stream`` for every answer shape (text,
tool-use argument fragments, thinking, usage restated, unknown events), and the same
classification of every failure (an error event mid-stream, a malformed event, a cut
stream, overloaded and rate-limited answers). The adapter and error tests also run this
path (the ``anthropic-lean`` harness)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prov_helpers import API_KEY, READ_FILE, make_provider, make_request

from geode.errors import ModelError
from geode.messages import StreamEvent, TextBlock, ToolUseBlock, Usage
from geode.providers.anthropic import AnthropicProvider
from geode.providers.base import INVALID_ARGUMENTS_KEY, BaseProvider
from geode.providers.retry import RetryPolicy, call_with_retry
from geode.testing._sse import SSEEvent
from geode.testing.fake_anthropic import FakeAnthropicServer


def ev(event: str, **data: Any) -> SSEEvent:
    return SSEEvent(json.dumps({"type": event, **data}), event=event)


def start(model: str = "served-model", **usage: int) -> SSEEvent:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
               "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 10, "output_tokens": 1, **usage}}
    return ev("message_start", message=message)


def text_block(index: int, *pieces: str) -> list[SSEEvent]:
    return [ev("content_block_start", index=index, content_block={"type": "text", "text": ""}),
            *(ev("content_block_delta", index=index,
                 delta={"type": "text_delta", "text": p}) for p in pieces),
            ev("content_block_stop", index=index)]


def tool_block(index: int, tool_id: str, *fragments: str) -> list[SSEEvent]:
    block = {"type": "tool_use", "id": tool_id, "name": "read_file", "input": {}}
    return [ev("content_block_start", index=index, content_block=block),
            *(ev("content_block_delta", index=index,
                 delta={"type": "input_json_delta", "partial_json": f}) for f in fragments),
            ev("content_block_stop", index=index)]


def end(stop_reason: str = "end_turn", **usage: int) -> list[SSEEvent]:
    return [ev("message_delta", delta={"stop_reason": stop_reason, "stop_sequence": None},
               usage={"output_tokens": 7, **usage}),
            ev("message_stop")]


@pytest.fixture
async def both() -> AsyncIterator[tuple[FakeAnthropicServer, BaseProvider, BaseProvider]]:
    """The fake, the adapter as the runtime builds it (lean) and the SDK path."""
    async with FakeAnthropicServer() as server:
        lean = make_provider("anthropic", server, lean=True)
        sdk = make_provider("anthropic", server)
        try:
            yield server, lean, sdk
        finally:
            await lean.aclose()
            await sdk.aclose()


async def run(provider: BaseProvider, **kwargs: Any) -> list[StreamEvent]:
    return [e async for e in provider.stream(make_request(**kwargs))]


async def same_on_both(both: Any, events: list[SSEEvent], **kwargs: Any) -> list[StreamEvent]:
    """The stream of ``events`` read lean and through the SDK: equal, event for event."""
    server, lean, sdk = both
    server.enqueue_sse(events)
    server.enqueue_sse(events)
    got = await run(lean, **kwargs)
    assert got == await run(sdk, **kwargs)
    assert got[-1].kind == "done" and [e.kind for e in got].count("done") == 1
    return got


async def failure(provider: BaseProvider) -> ModelError:
    with pytest.raises(ModelError) as info:
        await run(provider)
    return info.value


async def test_text_usage_and_model_as_the_sdk_reads_them(both: Any) -> None:
    got = await same_on_both(both, [
        start(cache_read_input_tokens=5, cache_creation_input_tokens=2),
        ev("ping"),
        *text_block(0, "Hello", "", ", wor", "ld"),
        ev("ping"),
        *end(output_tokens=9, input_tokens=11),  # a message_delta may restate the input
    ])
    assert [(e.kind, e.text) for e in got[:-1]] == [
        ("text_delta", "Hello"), ("text_delta", ", wor"), ("text_delta", "ld")]
    response = got[-1].response
    assert response is not None
    assert response.message.content == [TextBlock(text="Hello, world")]
    assert response.stop_reason == "end_turn"
    assert response.model == "served-model"
    assert response.usage == Usage(input_tokens=11 + 5 + 2, output_tokens=9)


async def test_tool_use_arguments_in_fragments_and_parallel_calls(both: Any) -> None:
    got = await same_on_both(both, [
        start(),
        *text_block(0, "Reading ", "both."),
        *tool_block(1, "toolu_a", '{"pa', 'th": "a', '.txt"}'),
        *tool_block(2, "toolu_b", "", '{"path": "b.txt"}'),
        *tool_block(3, "toolu_c"),  # no fragment at all: the start's input
        *end("tool_use"),
    ], tools=(READ_FILE,))
    assert [(e.kind, e.tool_name) for e in got if e.kind == "tool_use_start"] == [
        ("tool_use_start", "read_file")] * 3
    response = got[-1].response
    assert response is not None and response.stop_reason == "tool_use"
    assert response.message.content == [
        TextBlock(text="Reading both."),
        ToolUseBlock(id="toolu_a", name="read_file", input={"path": "a.txt"}),
        ToolUseBlock(id="toolu_b", name="read_file", input={"path": "b.txt"}),
        ToolUseBlock(id="toolu_c", name="read_file", input={}),
    ]


async def test_thinking_is_read_and_dropped_and_unknown_events_are_skipped(both: Any) -> None:
    thinking = [
        ev("content_block_start", index=0,
           content_block={"type": "thinking", "thinking": "", "signature": ""}),
        ev("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "hm"}),
        ev("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "s"}),
        ev("content_block_stop", index=0),
        ev("content_block_start", index=1,
           content_block={"type": "redacted_thinking", "data": "opaque"}),
        ev("content_block_stop", index=1),
    ]
    got = await same_on_both(both, [
        start(), *thinking, *text_block(2, "The answer."), *end("max_tokens")])
    assert [e.text for e in got if e.kind == "text_delta"] == ["The answer."]
    response = got[-1].response
    assert response is not None
    assert response.message.content == [TextBlock(text="The answer.")]
    assert response.stop_reason == "max_tokens"


async def test_the_fakes_own_answers_match_the_sdk_path(both: Any) -> None:
    server, lean, sdk = both
    for _ in range(2):
        server.enqueue_text("A streamed answer in words.", usage=(30, 6),
                            stop_reason="stop_sequence")
        server.enqueue_tool_calls([("read_file", {"path": "x"}, "toolu_x")], text="Let me see.")
    got = [await run(p, tools=(READ_FILE,)) for p in (lean, sdk) for _ in range(2)]
    assert got[0] == got[2] and got[1] == got[3]
    assert got[0][-1].response is not None
    assert got[0][-1].response.stop_reason == "stop_sequence"
    assert got[0][-1].response.usage == Usage(input_tokens=30, output_tokens=6)


async def test_cut_tool_arguments_go_to_schema_validation_not_a_crash(both: Any) -> None:
    server, lean, _ = both
    server.enqueue_sse([start(), *tool_block(0, "toolu_a", '{"path": "a.t'),
                        *end("max_tokens")])
    got = await run(lean, tools=(READ_FILE,))
    response = got[-1].response
    assert response is not None and response.stop_reason == "max_tokens"
    assert response.message.content == [
        ToolUseBlock(id="toolu_a", name="read_file",
                     input={INVALID_ARGUMENTS_KEY: '{"path": "a.t'})]


@pytest.mark.parametrize(("status", "kind", "code"), [
    (529, "overloaded", 529), (429, "rate_limit", 429), (500, "transient", 500)])
async def test_an_error_event_mid_stream_is_classified_as_the_sdk_does(
        both: Any, status: int, kind: str, code: int) -> None:
    server, lean, sdk = both
    errors = []
    for provider in (lean, sdk):
        server.enqueue_stream_error(status, text="partial answer", message="Overloaded")
        seen: list[str] = []
        with pytest.raises(ModelError) as info:
            async for event in provider.stream(make_request()):
                seen.append(event.kind)
        assert "text_delta" in seen and "done" not in seen  # it failed after text began
        errors.append(info.value)
    lean_err, sdk_err = errors
    assert (lean_err.kind, lean_err.status_code) == (kind, code)
    assert (sdk_err.kind, sdk_err.status_code) == (kind, code)
    assert str(lean_err) == str(sdk_err)
    assert "Overloaded" in str(lean_err)


async def test_an_error_event_whose_name_was_lost_is_still_an_error(both: Any) -> None:
    server, lean, _ = both
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    server.enqueue_sse([start(), SSEEvent(json.dumps(body))])
    err = await failure(lean)
    assert (err.kind, err.status_code) == ("overloaded", 529)


async def test_malformed_events_are_transient(both: Any) -> None:
    server, lean, sdk = both
    for provider in (lean, sdk):
        server.enqueue_malformed()  # a message_start whose JSON never ends
        err = await failure(provider)
        assert err.kind == "transient" and "malformed" in str(err)
    server.enqueue_sse([start(), SSEEvent("[1, 2]", event="content_block_start")])
    assert (await failure(lean)).kind == "transient"
    server.enqueue_sse([start(), ev("content_block_delta", index=0)])  # no such block, no delta
    assert (await failure(lean)).kind == "transient"


async def test_a_cut_stream_is_transient_and_a_retry_reads_the_next_answer_whole(
        both: Any) -> None:
    server, lean, sdk = both
    for provider in (lean, sdk):
        server.enqueue_drop(mid_stream=True)
        assert (await failure(provider)).kind == "transient"
        # the body ends cleanly but before message_stop (a proxy's cut)
        server.enqueue_sse([start(), *text_block(0, "cut")])
        err = await failure(provider)
        assert err.kind == "transient" and "message_stop" in str(err)

    server.enqueue_sse([start(), *text_block(0, "cut")], drop=True)
    server.enqueue_text("whole answer")
    seen: list[list[str]] = []

    async def once() -> Any:
        texts: list[str] = []
        seen.append(texts)
        async for event in lean.stream(make_request()):
            if event.kind == "text_delta":
                texts.append(event.text)
            elif event.kind == "done":
                return event.response
        raise AssertionError("no done event")

    async def no_sleep(_delay: float) -> None:
        return None

    response = await call_with_retry(once, policy=RetryPolicy(max_attempts=2), sleep=no_sleep)
    assert seen == [["cut"], ["whole ", "answer"]]
    assert response.message.text == "whole answer"


@pytest.mark.parametrize(("status", "headers", "kind", "retry_after"), [
    (529, {"retry-after": "3"}, "overloaded", 3.0),
    (503, {}, "overloaded", None),
    (429, {"retry-after-ms": "1500"}, "rate_limit", 1.5),
])
async def test_overloaded_and_rate_limited_before_the_stream(
        both: Any, status: int, headers: dict[str, str], kind: str,
        retry_after: float | None) -> None:
    server, lean, sdk = both
    errors = []
    for provider in (lean, sdk):
        server.enqueue_error(status, headers=headers, message="Overloaded")
        errors.append(await failure(provider))
    for err in errors:
        assert (err.kind, err.status_code, err.retry_after) == (kind, status, retry_after)
    assert str(errors[0]) == str(errors[1])


async def test_a_streamed_call_is_one_post_with_the_sdks_headers_and_no_sdk_request(
        both: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server, lean, _ = both
    assert isinstance(lean, AnthropicProvider)

    def no_sdk(*_a: Any, **_kw: Any) -> Any:
        raise AssertionError("the SDK's stream was used")

    monkeypatch.setattr(lean._client.messages, "stream", no_sdk)
    monkeypatch.setattr(lean._client.messages, "create", no_sdk)
    for i in range(3):
        server.enqueue_text(f"streamed {i}")
        got = await run(lean)
        assert got[-1].response is not None
        assert got[-1].response.message.text == f"streamed {i}"
    req = server.generate_requests[-1]
    assert req.path == "/v1/messages"
    assert API_KEY in (req.headers.get("x-api-key"), req.headers.get("authorization", "")[7:])
    assert req.headers["anthropic-version"] == lean._client.default_headers["anthropic-version"]
    assert req.headers["user-agent"].startswith("AsyncAnthropic/Python")
    assert req.body["stream"] is True and req.body["system"] == "You are terse."
    assert len(server.connections) == 1  # one pooled connection for the three calls


async def test_the_runtime_builds_the_lean_path() -> None:
    from geode.providers._clients import ClientCache
    from geode.providers.catalog import resolve_model
    from geode.providers.factory import build_provider

    async with FakeAnthropicServer() as server:
        cache = ClientCache()
        provider = build_provider(resolve_model("anthropic:claude-x"), api_key=API_KEY,
                                  base_url=server.base_url, clients=cache)
        server.enqueue_text("via the runtime")
        try:
            got = await run(provider)
        finally:
            await provider.aclose()
            await cache.aclose()
        assert isinstance(provider, AnthropicProvider) and provider._lean is not None
        assert got[-1].response is not None
        assert got[-1].response.message.text == "via the runtime"
