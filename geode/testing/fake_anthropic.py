"""A wire-level fake of Anthropic's Messages API, for tests and offline demos.

::

    async with FakeAnthropicServer() as srv:
        srv.enqueue_text("hello")
        client = anthropic.AsyncAnthropic(api_key="test", base_url=srv.base_url)

Run ``python -m geode.testing.fake_anthropic --port 8901`` to serve a fixed answer.
"""

from __future__ import annotations

import json
from typing import Any

from geode.testing._sse import (
    FakeModelServer,
    RecordedRequest,
    SSEEvent,
    TextReply,
    ToolCallsReply,
    UsageLike,
    _usage,
    serve_main,
    split_text,
)

__all__ = ["FakeAnthropicServer", "RecordedRequest"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


class FakeAnthropicServer(FakeModelServer):
    """Serves ``POST /v1/messages`` (JSON or SSE) and ``GET /v1/models`` from a script.

    ``base_url`` is the root URL, as ``anthropic.AsyncAnthropic`` expects.
    """

    generate_path = "/v1/messages"
    tool_id_prefix = "toolu_fake_"
    malformed_event = "message_start"  # the SDK skips SSE events that have no name

    @property
    def base_url(self) -> str:
        return self.root_url

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        err_type = _ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": err_type, "message": message}}

    def models_body(self) -> dict[str, Any]:
        data = [
            {
                "type": "model",
                "id": m,
                "display_name": m,
                "created_at": "2025-01-01T00:00:00Z",
            }
            for m in self.models
        ]
        return {
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }

    @staticmethod
    def _content(reply: TextReply | ToolCallsReply) -> list[dict[str, Any]]:
        if isinstance(reply, TextReply):
            return [{"type": "text", "text": reply.text}]
        blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        blocks += [
            {"type": "tool_use", "id": cid, "name": name, "input": tool_input}
            for name, tool_input, cid in reply.calls
        ]
        return blocks

    @staticmethod
    def _stop_reason(reply: TextReply | ToolCallsReply) -> str:
        if isinstance(reply, ToolCallsReply):
            return "tool_use"
        return reply.stop_reason or "end_turn"

    def _message(self, reply: TextReply | ToolCallsReply, body: Any) -> dict[str, Any]:
        model = body.get("model", "fake-model") if isinstance(body, dict) else "fake-model"
        return {
            "id": self.next_id("msg_fake_"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": reply.usage.input_tokens,
                "output_tokens": reply.usage.output_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }

    def render_json(self, reply: TextReply | ToolCallsReply, body: Any) -> dict[str, Any]:
        message = self._message(reply, body)
        message["content"] = self._content(reply)
        message["stop_reason"] = self._stop_reason(reply)
        return message

    def render_sse(self, reply: TextReply | ToolCallsReply, body: Any) -> list[SSEEvent]:
        def ev(event: str, data: dict[str, Any]) -> SSEEvent:
            return SSEEvent(json.dumps({"type": event, **data}), event=event)

        start = self._message(reply, body)
        # As the real API: message_start reports input tokens and a placeholder output count.
        start["usage"] = {**start["usage"], "output_tokens": 1}
        events = [ev("message_start", {"message": start}), ev("ping", {})]
        for index, block in enumerate(self._content(reply)):
            if block["type"] == "text":
                events.append(
                    ev(
                        "content_block_start",
                        {"index": index, "content_block": {**block, "text": ""}},
                    )
                )
                events += [
                    ev(
                        "content_block_delta",
                        {"index": index, "delta": {"type": "text_delta", "text": piece}},
                    )
                    for piece in split_text(block["text"])
                ]
            else:
                start_block = {**block, "input": {}}
                events.append(
                    ev("content_block_start", {"index": index, "content_block": start_block})
                )
                raw = json.dumps(block["input"])
                half = len(raw) // 2
                for piece in (raw[:half], raw[half:]):
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    events.append(ev("content_block_delta", {"index": index, "delta": delta}))
            events.append(ev("content_block_stop", {"index": index}))
        events.append(
            ev(
                "message_delta",
                {
                    "delta": {"stop_reason": self._stop_reason(reply), "stop_sequence": None},
                    "usage": {"output_tokens": reply.usage.output_tokens},
                },
            )
        )
        events.append(ev("message_stop", {}))
        return events

    def stream_events(
        self, text: str = "", *, usage: UsageLike = None, stop_reason: str | None = None,
        body: Any = None,
    ) -> list[SSEEvent]:
        """The events of a streamed answer of ``text`` (``message_start`` … ``message_stop``),
        to edit into an odd answer for :meth:`enqueue_sse`."""
        return self.render_sse(TextReply(text, _usage(usage, text), stop_reason), body or {})

    def enqueue_stream_error(self, status: int, *, text: str = "", message: str = "") -> None:
        """Answer one streamed request with 200, ``text`` so far, then an ``error`` event of
        the type ``status`` stands for (529: ``overloaded_error``, 429: ``rate_limit_error``),
        as the API reports a failure after the stream began."""
        events = self.stream_events(text)
        began = [e for e in events if e.event not in ("content_block_stop", "message_delta",
                                                       "message_stop")]
        error = self.error_body(status, message or f"fake error {status}")
        self.enqueue_sse([*began, SSEEvent(json.dumps(error), event="error")])


if __name__ == "__main__":
    serve_main(FakeAnthropicServer)
