"""A wire-level fake of the OpenAI Chat Completions API, for tests and offline demos.

::

    async with FakeOpenAIServer() as srv:
        srv.enqueue_tool_calls([("read_file", {"path": "a"}), ("read_file", {"path": "b"})])
        client = openai.AsyncOpenAI(api_key="test", base_url=srv.base_url)

Run ``python -m geode.testing.fake_openai --port 8900`` to serve a fixed answer; point
GEODE at it with ``OPENAI_BASE_URL=http://127.0.0.1:8900/v1 --model openai:fake-model``.
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
    serve_main,
    split_text,
)

__all__ = ["FakeOpenAIServer", "RecordedRequest"]

_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}
_CREATED = 1_750_000_000  # fixed, so two renders of one reply compare equal


class FakeOpenAIServer(FakeModelServer):
    """Serves ``POST /v1/chat/completions`` (JSON or SSE) and ``GET /v1/models``.

    ``base_url`` ends in ``/v1``, as ``openai.AsyncOpenAI`` expects.
    """

    generate_path = "/v1/chat/completions"
    tool_id_prefix = "call_fake_"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        err_type, code = _ERROR_TYPES.get(status, ("server_error", None))
        return {"error": {"message": message, "type": err_type, "param": None, "code": code}}

    def models_body(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": m, "object": "model", "created": _CREATED, "owned_by": "geode-fake"}
                for m in self.models
            ],
        }

    @staticmethod
    def _finish_reason(reply: TextReply | ToolCallsReply) -> str:
        if isinstance(reply, ToolCallsReply):
            return "tool_calls"
        return reply.stop_reason or "stop"

    @staticmethod
    def _usage(reply: TextReply | ToolCallsReply) -> dict[str, int]:
        u = reply.usage
        return {
            "prompt_tokens": u.input_tokens,
            "completion_tokens": u.output_tokens,
            "total_tokens": u.input_tokens + u.output_tokens,
        }

    @staticmethod
    def _model(body: Any) -> str:
        return str(body.get("model", "fake-model")) if isinstance(body, dict) else "fake-model"

    def render_json(self, reply: TextReply | ToolCallsReply, body: Any) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if isinstance(reply, ToolCallsReply):
            message["tool_calls"] = [
                {
                    "id": cid,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(tool_input)},
                }
                for name, tool_input, cid in reply.calls
            ]
        message["refusal"] = None
        return {
            "id": self.next_id("chatcmpl-fake"),
            "object": "chat.completion",
            "created": _CREATED,
            "model": self._model(body),
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self._finish_reason(reply),
                }
            ],
            "usage": self._usage(reply),
        }

    def render_sse(self, reply: TextReply | ToolCallsReply, body: Any) -> list[SSEEvent]:
        completion_id = self.next_id("chatcmpl-fake")
        model = self._model(body)
        options = body.get("stream_options") if isinstance(body, dict) else None
        include_usage = isinstance(options, dict) and options.get("include_usage") is True

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> SSEEvent:
            data: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": _CREATED,
                "model": model,
                "system_fingerprint": None,
                "choices": choices,
            }
            if include_usage:
                data["usage"] = None  # every chunk carries the key; only the last a value
            data.update(extra)
            return SSEEvent(json.dumps(data))

        def delta(d: dict[str, Any], finish: str | None = None) -> SSEEvent:
            return chunk([{"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}])

        events = [delta({"role": "assistant", "content": ""})]
        if reply.text:
            events += [delta({"content": piece}) for piece in split_text(reply.text)]
        if isinstance(reply, ToolCallsReply):
            for index, (name, tool_input, cid) in enumerate(reply.calls):
                head = {
                    "index": index,
                    "id": cid,
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }
                events.append(delta({"tool_calls": [head]}))
                raw = json.dumps(tool_input)
                half = len(raw) // 2
                for piece in (raw[:half], raw[half:]):
                    part = {"index": index, "function": {"arguments": piece}}
                    events.append(delta({"tool_calls": [part]}))
        events.append(delta({}, self._finish_reason(reply)))
        if include_usage:
            events.append(chunk([], usage=self._usage(reply)))
        events.append(SSEEvent("[DONE]"))
        return events


if __name__ == "__main__":
    serve_main(FakeOpenAIServer)
