"""The Responses API adapter through the real `openai` SDK against the wire-level fake:
reasoning items carried across calls, errors inside a 200 stream, failed responses."""

from __future__ import annotations

import json

import pytest
from prov_helpers import API_KEY, READ_FILE, make_request

from geode.errors import ModelError
from geode.messages import Message, ReasoningBlock, TextBlock, ToolResultBlock, ToolUseBlock
from geode.providers.openai_responses import REASONING_PROVIDER, OpenAIResponsesProvider
from geode.testing._sse import SSEEvent
from geode.testing.fake_openai_responses import FakeResponsesServer


def _provider(srv: FakeResponsesServer) -> OpenAIResponsesProvider:
    return OpenAIResponsesProvider(api_key=API_KEY, base_url=srv.base_url, timeout=10.0)


@pytest.mark.parametrize("stream", [False, True])
async def test_reasoning_items_are_kept_and_sent_back_on_the_next_call(stream: bool) -> None:
    async with FakeResponsesServer(reasoning=True) as srv:
        provider = _provider(srv)
        srv.enqueue_tool_calls([("read_file", {"path": "a"}, "call_1")], usage=(10, 5))
        srv.enqueue_text("done", usage=(20, 3))
        try:
            if stream:
                events = [e async for e in provider.stream(make_request(tools=(READ_FILE,)))]
                first = events[-1].response
                assert first is not None
                assert [e.tool_name for e in events if e.kind == "tool_use_start"] == [
                    "read_file"
                ]
            else:
                first = await provider.complete(make_request(tools=(READ_FILE,)))
            reasoning = first.message.content[0]
            assert isinstance(reasoning, ReasoningBlock)
            assert reasoning.provider == REASONING_PROVIDER
            assert reasoning.data["encrypted_content"].startswith("enc-rs_fake_")
            assert first.message.tool_uses == [
                ToolUseBlock(id="call_1", name="read_file", input={"path": "a"})
            ]
            assert first.message.text == ""  # reasoning is never shown as text
            assert (first.stop_reason, first.usage.input_tokens) == ("tool_use", 10)

            result = Message(role="user", content=[ToolResultBlock.text("call_1", "A")])
            second = await provider.complete(
                make_request(Message.user("read a"), first.message, result, tools=(READ_FILE,))
            )
        finally:
            await provider.aclose()
        sent = srv.generate_requests[-1].body
    assert second.message.text == "done"
    # the encrypted reasoning goes back, before the call it led to
    assert sent["input"][1] == {
        "type": "reasoning",
        "id": reasoning.data["id"],
        "summary": [],
        "encrypted_content": reasoning.data["encrypted_content"],
    }
    assert sent["input"][2]["type"] == "function_call"
    assert sent["input"][3] == {"type": "function_call_output", "call_id": "call_1",
                                "output": "A"}
    # the checkpoint chain stores the block losslessly
    again = Message.model_validate(first.message.model_dump(mode="json"))
    assert again == first.message


async def test_reasoning_of_another_model_is_not_sent_after_a_switch() -> None:
    async with FakeResponsesServer(reasoning=True) as srv:
        provider = _provider(srv)
        srv.enqueue_text("first")
        srv.enqueue_text("second")
        srv.enqueue_text("third")
        try:
            first = await provider.complete(make_request(model="gpt-6-sol"))
            history = (Message.user("a"), first.message, Message.user("b"))
            await provider.complete(make_request(*history, model="gpt-6-luna"))
            await provider.complete(make_request(*history, model="gpt-6-sol"))
        finally:
            await provider.aclose()
        other, same = (r.body["input"] for r in srv.generate_requests[1:])
    assert [i.get("type") for i in other] == [None, None, None]  # a, "first", b
    assert [i.get("type") for i in same] == [None, "reasoning", None, None]
    assert "geode_origin" not in same[1]


async def test_foreign_reasoning_blocks_are_not_sent() -> None:
    async with FakeResponsesServer() as srv:
        srv.enqueue_text("ok")
        provider = _provider(srv)
        other = Message(role="assistant", content=[
            ReasoningBlock(provider="someone-else", data={"type": "reasoning", "id": "x"}),
            TextBlock(text="earlier"),
        ])
        await provider.complete(make_request(Message.user("a"), other, Message.user("b")))
        await provider.aclose()
        sent = srv.generate_requests[-1].body
    assert sent["input"] == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "earlier"},
        {"role": "user", "content": "b"},
    ]


async def test_anthropic_adapter_skips_reasoning_blocks() -> None:
    from geode.providers.anthropic import _message_param

    msg = Message(role="assistant", content=[
        ReasoningBlock(provider=REASONING_PROVIDER, data={"type": "reasoning"}),
        TextBlock(text="hi"),
    ])
    assert _message_param(msg) == {"role": "assistant",
                                   "content": [{"type": "text", "text": "hi"}]}


@pytest.mark.parametrize(
    ("code", "kind"),
    [("rate_limit_exceeded", "rate_limit"), ("server_error", "transient"),
     ("context_length_exceeded", "context_overflow")],
)
async def test_error_event_inside_a_200_stream_is_classified(code: str, kind: str) -> None:
    async with FakeResponsesServer() as srv:
        provider = _provider(srv)
        body = {"type": "error", "code": code, "message": "boom", "param": None,
                "sequence_number": 1}
        srv.render_sse = lambda reply, body_=None: [SSEEvent(json.dumps(body), "error")]
        srv.enqueue_text("never")
        with pytest.raises(ModelError) as info:
            async for _ in provider.stream(make_request()):
                pass
        await provider.aclose()
    assert info.value.kind == kind


async def test_failed_response_is_a_model_error_not_an_empty_answer() -> None:
    failed = {
        "id": "resp_x", "object": "response", "created_at": 1, "model": "fake-model",
        "status": "failed", "output": [], "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": [], "error": {"code": "server_error", "message": "upstream failed"},
    }
    async with FakeResponsesServer() as srv:
        srv.enqueue_raw(failed)
        provider = _provider(srv)
        with pytest.raises(ModelError) as info:
            await provider.complete(make_request())
        await provider.aclose()
    assert info.value.kind == "transient"
    assert "upstream failed" in str(info.value)


async def test_stream_cut_before_completion_is_transient() -> None:
    async with FakeResponsesServer() as srv:
        provider = _provider(srv)
        full = srv.render_sse
        srv.render_sse = lambda reply, body: full(reply, body)[:-1]  # no response.completed
        srv.enqueue_text("cut short")
        with pytest.raises(ModelError) as info:
            async for _ in provider.stream(make_request()):
                pass
        await provider.aclose()
    assert info.value.kind == "transient"
    assert "before the response completed" in str(info.value)
