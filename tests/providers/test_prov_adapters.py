"""Both adapters through the real SDKs against the wire-level fakes: what is sent, what is read."""

from __future__ import annotations

import json

import pytest
from prov_helpers import API_KEY, READ_FILE, Harness, make_request

from geode.messages import (
    ImageBlock,
    Message,
    ModelResponse,
    StreamEvent,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

PNG_B64 = "iVBORw0KGgo="


async def collect(harness: Harness, **kwargs: object) -> list[StreamEvent]:
    return [e async for e in harness.provider.stream(make_request(**kwargs))]  # type: ignore[arg-type]


async def test_text_round_trip(harness: Harness) -> None:
    harness.server.enqueue_text("Hello there, world.", usage=(21, 4))

    response = await harness.provider.complete(make_request(Message.user("Say hello")))

    assert response.message == Message.assistant("Hello there, world.")
    assert response.stop_reason == "end_turn"
    assert response.usage == Usage(input_tokens=21, output_tokens=4)
    assert response.model == "fake-model"
    body = harness.body()
    assert body["model"] == "fake-model"
    assert "stream" not in body
    if harness.vendor == "anthropic":
        assert body["system"] == "You are terse."
        assert body["max_tokens"] == 256
        assert body["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "Say hello"}]}
        ]
        headers = harness.server.requests[-1].headers
        # older SDKs send x-api-key, current ones a bearer token
        assert API_KEY in (headers.get("x-api-key"), headers.get("authorization", "")[7:])
    elif harness.vendor == "responses":
        assert body["instructions"] == "You are terse."
        assert body["max_output_tokens"] == 256
        assert body["input"] == [{"role": "user", "content": "Say hello"}]
        assert body["store"] is False  # stateless: GEODE holds the conversation
        assert body["include"] == ["reasoning.encrypted_content"]
        assert harness.server.requests[-1].headers["authorization"] == f"Bearer {API_KEY}"
    else:
        assert body["max_tokens"] == 256  # a custom endpoint gets the classic field
        assert body["messages"] == [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say hello"},
        ]
        assert harness.server.requests[-1].headers["authorization"] == f"Bearer {API_KEY}"


async def test_sdk_retries_are_off(harness: Harness) -> None:
    harness.server.enqueue_error(500)
    harness.server.enqueue_text("never reached")

    with pytest.raises(Exception, match="HTTP 500"):
        await harness.provider.complete(make_request())

    assert len(harness.server.generate_requests) == 1
    assert harness.server.pending == 1


async def test_tools_are_sent_in_vendor_shape(harness: Harness) -> None:
    harness.server.enqueue_text("ok")

    await harness.provider.complete(make_request(tools=(READ_FILE,)))

    body = harness.body()
    if harness.vendor == "anthropic":
        assert body["tools"] == [
            {
                "name": "read_file",
                "description": "Read a file.",
                "input_schema": READ_FILE.input_schema,
            }
        ]
    elif harness.vendor == "responses":
        assert body["tools"] == [
            {
                "type": "function",
                "name": "read_file",
                "description": "Read a file.",
                "parameters": READ_FILE.input_schema,
                "strict": False,
            }
        ]
    else:
        assert body["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a file.",
                    "parameters": READ_FILE.input_schema,
                },
            }
        ]
    assert "tool_choice" not in body  # "auto" is the API default and is not sent


async def test_parallel_tool_calls_and_results_round_trip(harness: Harness) -> None:
    harness.server.enqueue_tool_calls(
        [("read_file", {"path": "a.txt"}), ("read_file", {"path": "b.txt"})], usage=(30, 12)
    )
    first = await harness.provider.complete(make_request(tools=(READ_FILE,)))

    assert first.stop_reason == "tool_use"
    assert first.usage == Usage(input_tokens=30, output_tokens=12)
    uses = first.message.tool_uses
    assert [(u.name, u.input) for u in uses] == [
        ("read_file", {"path": "a.txt"}),
        ("read_file", {"path": "b.txt"}),
    ]
    assert uses[0].id != uses[1].id

    results = Message(
        role="user",
        content=[
            ToolResultBlock.text(uses[0].id, "contents of a"),
            ToolResultBlock.text(uses[1].id, "no such file", is_error=True),
        ],
    )
    harness.server.enqueue_text("Both read.")
    second = await harness.provider.complete(
        make_request(Message.user("read both"), first.message, results, tools=(READ_FILE,))
    )
    assert second.message.text == "Both read."

    if harness.vendor == "responses":
        assert harness.body()["input"][1:] == [
            {
                "type": "function_call",
                "call_id": uses[0].id,
                "name": "read_file",
                "arguments": json.dumps({"path": "a.txt"}),
            },
            {
                "type": "function_call",
                "call_id": uses[1].id,
                "name": "read_file",
                "arguments": json.dumps({"path": "b.txt"}),
            },
            {"type": "function_call_output", "call_id": uses[0].id, "output": "contents of a"},
            {
                "type": "function_call_output",
                "call_id": uses[1].id,
                "output": "[tool error] no such file",
            },
        ]
        return
    messages = harness.body()["messages"]
    if harness.vendor == "anthropic":
        assert messages[1:] == [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": uses[0].id,
                        "name": "read_file",
                        "input": {"path": "a.txt"},
                    },
                    {
                        "type": "tool_use",
                        "id": uses[1].id,
                        "name": "read_file",
                        "input": {"path": "b.txt"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": uses[0].id,
                        "content": [{"type": "text", "text": "contents of a"}],
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": uses[1].id,
                        "content": [{"type": "text", "text": "no such file"}],
                        "is_error": True,
                    },
                ],
            },
        ]
    else:
        assistant, tool_a, tool_b = messages[2:]
        assert assistant["role"] == "assistant"
        assert assistant["content"] is None
        assert [
            (c["id"], c["type"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in assistant["tool_calls"]
        ] == [
            (uses[0].id, "function", "read_file", {"path": "a.txt"}),
            (uses[1].id, "function", "read_file", {"path": "b.txt"}),
        ]
        assert tool_a == {"role": "tool", "tool_call_id": uses[0].id, "content": "contents of a"}
        assert tool_b == {
            "role": "tool",
            "tool_call_id": uses[1].id,
            "content": "[tool error] no such file",
        }


async def test_text_alongside_tool_calls(harness: Harness) -> None:
    harness.server.enqueue_tool_calls([("read_file", {"path": "x"})], text="Let me look.")

    response = await harness.provider.complete(make_request(tools=(READ_FILE,)))

    assert response.message.text == "Let me look."
    assert [u.input for u in response.message.tool_uses] == [{"path": "x"}]
    assert response.stop_reason == "tool_use"


async def test_tool_choice_none_is_sent(harness: Harness) -> None:
    harness.server.enqueue_text("no tools, as asked")

    await harness.provider.complete(make_request(tools=(READ_FILE,), tool_choice="none"))

    expected = {"type": "none"} if harness.vendor == "anthropic" else "none"
    assert harness.body()["tool_choice"] == expected


async def test_tool_choice_none_in_stream(harness: Harness) -> None:
    harness.server.enqueue_text("streamed, no tools")

    await collect(harness, tools=(READ_FILE,), tool_choice="none")

    expected = {"type": "none"} if harness.vendor == "anthropic" else "none"
    assert harness.body()["tool_choice"] == expected


@pytest.mark.parametrize(
    ("native", "expected"),
    [
        ({"anthropic": "max_tokens", "openai": "length", "responses": "max_output_tokens"},
         "max_tokens"),
        ({"anthropic": "refusal", "openai": "content_filter", "responses": "content_filter"},
         "refusal"),
        ({"anthropic": "stop_sequence", "openai": "stop", "responses": None}, None),
        ({"anthropic": "end_turn", "openai": "stop", "responses": None}, "end_turn"),
    ],
)
async def test_stop_reasons(
    harness: Harness, native: dict[str, str | None], expected: str | None
) -> None:
    harness.server.enqueue_text("cut", stop_reason=native[harness.vendor])

    response = await harness.provider.complete(make_request())

    if expected is None:  # stop_sequence exists only on Anthropic; OpenAI folds it into stop
        expected = "stop_sequence" if harness.vendor == "anthropic" else "end_turn"
    assert response.stop_reason == expected


async def test_streaming_text_matches_non_streaming(harness: Harness) -> None:
    text = "Streaming works one word at a time."
    harness.server.enqueue_text(text, usage=(40, 9))
    harness.server.enqueue_text(text, usage=(40, 9))

    plain = await harness.provider.complete(make_request())
    events = await collect(harness)

    deltas = [e.text for e in events if e.kind == "text_delta"]
    assert len(deltas) > 3
    assert "".join(deltas) == text
    assert [e.kind for e in events][-1] == "done"
    assert [e.kind for e in events].count("done") == 1
    final = events[-1].response
    assert final == plain
    body = harness.body()
    assert body["stream"] is True
    if harness.vendor == "openai":
        assert body["stream_options"] == {"include_usage": True}


async def test_streaming_parallel_tool_calls(harness: Harness) -> None:
    calls = [("read_file", {"path": "a.txt"}, "id_a"), ("read_file", {"path": "b.txt"}, "id_b")]
    harness.server.enqueue_tool_calls(calls, text="Reading.", usage=(50, 20))
    harness.server.enqueue_tool_calls(calls, text="Reading.", usage=(50, 20))

    plain = await harness.provider.complete(make_request(tools=(READ_FILE,)))
    events = await collect(harness, tools=(READ_FILE,))

    assert [e.tool_name for e in events if e.kind == "tool_use_start"] == ["read_file"] * 2
    final = events[-1].response
    assert isinstance(final, ModelResponse)
    assert final == plain
    assert final.message.content == [
        TextBlock(text="Reading."),
        ToolUseBlock(id="id_a", name="read_file", input={"path": "a.txt"}),
        ToolUseBlock(id="id_b", name="read_file", input={"path": "b.txt"}),
    ]
    assert final.stop_reason == "tool_use"
    assert final.usage == Usage(input_tokens=50, output_tokens=20)


async def test_images_in_user_input_and_tool_results(harness: Harness) -> None:
    harness.server.enqueue_text("I see it.")
    image = ImageBlock(media_type="image/png", data=PNG_B64)
    user = Message(role="user", content=[TextBlock(text="What is this?"), image])
    call = Message(role="assistant", content=[ToolUseBlock(id="t1", name="screenshot", input={})])
    result = Message(
        role="user",
        content=[ToolResultBlock(tool_use_id="t1", content=[TextBlock(text="shot"), image])],
    )

    await harness.provider.complete(make_request(user, call, result))

    if harness.vendor == "responses":
        items = harness.body()["input"]
        url = f"data:image/png;base64,{PNG_B64}"
        assert items[0] == {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": url},
            ],
        }
        # the function output carries the text; its image follows as user content
        assert items[2] == {"type": "function_call_output", "call_id": "t1", "output": "shot"}
        assert items[3] == {"role": "user", "content": [{"type": "input_image", "image_url": url}]}
        return
    messages = harness.body()["messages"]
    if harness.vendor == "anthropic":
        source = {"type": "base64", "media_type": "image/png", "data": PNG_B64}
        assert messages[0]["content"][1] == {"type": "image", "source": source}
        assert messages[2]["content"][0]["content"] == [
            {"type": "text", "text": "shot"},
            {"type": "image", "source": source},
        ]
    else:
        url = {"url": f"data:image/png;base64,{PNG_B64}"}
        assert messages[1]["content"] == [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": url},
        ]
        # the tool message carries the text; its image follows as user content
        assert messages[3] == {"role": "tool", "tool_call_id": "t1", "content": "shot"}
        assert messages[4] == {"role": "user", "content": [{"type": "image_url", "image_url": url}]}


async def test_consumer_may_stop_a_stream_early(harness: Harness) -> None:
    harness.server.enqueue_text("one two three four five")
    harness.server.enqueue_text("next call works")

    stream = harness.provider.stream(make_request())
    first = await anext(stream)  # type: ignore[call-overload]
    await stream.aclose()  # type: ignore[attr-defined]
    after = await harness.provider.complete(make_request())

    assert first.kind == "text_delta"
    assert after.message.text == "next call works"


async def test_openai_official_endpoint_uses_max_completion_tokens() -> None:
    from geode.providers.openai_compat import OpenAICompatProvider
    from geode.testing.fake_openai import FakeOpenAIServer

    async with FakeOpenAIServer() as srv:
        srv.enqueue_text("ok")
        provider = OpenAICompatProvider(
            provider_name="openai",
            api_key=API_KEY,
            base_url=srv.base_url,
            token_limit_field="max_completion_tokens",
        )
        await provider.complete(make_request())
        await provider.aclose()
        body = srv.generate_requests[0].body
    assert body["max_completion_tokens"] == 256
    assert "max_tokens" not in body


async def test_openai_unparsable_tool_arguments_are_passed_on_not_crashed(
    openai_harness: Harness,
) -> None:
    from geode.providers.openai_compat import INVALID_ARGUMENTS_KEY

    srv = openai_harness.server
    bad = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "fake-model",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": '},
                        }
                    ],
                },
            }
        ],
    }
    srv.enqueue_raw(bad)

    response = await openai_harness.provider.complete(make_request(tools=(READ_FILE,)))

    assert response.message.tool_uses == [
        ToolUseBlock(id="c1", name="read_file", input={INVALID_ARGUMENTS_KEY: '{"path": '})
    ]


async def test_models_endpoint(harness: Harness) -> None:
    import httpx

    async with httpx.AsyncClient() as client:
        r = await client.get(f"{harness.server.root_url}/v1/models")
    assert r.status_code == 200
    assert [m["id"] for m in r.json()["data"]] == ["fake-model"]
    assert harness.server.generate_requests == []
