"""Adapter for the Anthropic Messages API through ``anthropic.AsyncAnthropic``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anthropic
import structlog

from geode.errors import ModelError
from geode.messages import (
    ContentBlock,
    ImageBlock,
    Message,
    ModelResponse,
    ReasoningBlock,
    StopReason,
    StreamEvent,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from geode.providers._errors import (
    map_anthropic_error,
    map_anthropic_status,
    map_anthropic_stream_error,
)
from geode.providers._sse import (
    MALFORMED,
    HTTPStatus,
    LeanEndpoint,
    malformed_error,
    sse_events,
    transport_error,
)
from geode.providers.base import INVALID_ARGUMENTS_KEY, BaseProvider, ModelRequest
from geode.secret_redaction import redact_text

if TYPE_CHECKING:
    from geode.providers._clients import ClientCache

__all__ = ["AnthropicProvider"]

log = structlog.get_logger(__name__)

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    # The window filled while generating: for the loop this is a truncated answer.
    "model_context_window_exceeded": "max_tokens",
    "pause_turn": "end_turn",
}


def _make_timeout(timeout: float) -> anthropic.Timeout:
    """An explicit transport timeout: ``timeout`` per read/write, connect capped at 10 s."""
    return anthropic.Timeout(timeout, connect=min(10.0, timeout))


class AnthropicProvider(BaseProvider):
    """Calls Anthropic's Messages API; translates to and from :mod:`geode.messages`.

    Args:
        api_key: the key (the settings module reads ``ANTHROPIC_API_KEY``).
        base_url: API root, e.g. ``https://api.anthropic.com`` or a proxy / fake server.
        timeout: seconds per network read/write.
        provider_name: name used in errors and logs.
        client: a shared SDK client (:class:`~geode.providers._clients.ClientCache`); the
            cache owns it, so :meth:`aclose` leaves it open. Without one the adapter builds
            and owns its own.
        http: the runtime's :class:`~geode.providers._clients.ClientCache`: given, a
            streamed call is one POST of the wire JSON on its shared aiohttp session, its
            server-sent events each one ``json.loads`` (the SDK's ``messages.stream`` builds
            a pydantic model per event and re-snapshots the message: ~0.3 ms of CPU per
            token, see ``benchmarks/bench_provider_stream.py``), with the SDK client's
            headers, credential and timeouts; failures are classified as the SDK's are. A
            non-streamed call stays on the SDK.
    """

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 120.0,
        provider_name: str = "anthropic",
        client: anthropic.AsyncAnthropic | None = None,
        http: ClientCache | None = None,
    ) -> None:
        self.name = provider_name
        # max_retries=0: retries are the loop's explicit policy (geode.providers.retry),
        # never hidden inside the SDK where they would double the bound.
        self._owns_client = client is None
        self._client = client or anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            timeout=_make_timeout(timeout),
            max_retries=0,
        )
        self._lean: LeanEndpoint | None = None
        if http is not None:
            c = self._client
            self._lean = LeanEndpoint.of(
                http, url=f"{str(c.base_url).rstrip('/')}/v1/messages",
                headers={**c.default_headers, **c.auth_headers}, timeout=timeout)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.close()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        try:
            message = await self._client.messages.create(**_request_params(request))
        except Exception as exc:
            raise map_anthropic_error(exc, provider=self.name) from exc
        return _to_response(message, request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if self._lean is not None:
            async for lean_event in self._stream_lean(request, self._lean):
                yield lean_event
            return
        complete = False
        try:
            async with self._client.messages.stream(**_request_params(request)) as stream:
                async for event in stream:
                    if event.type == "content_block_start":
                        if event.content_block.type == "tool_use":
                            yield StreamEvent(
                                kind="tool_use_start", tool_name=event.content_block.name
                            )
                    elif event.type == "content_block_delta":
                        if event.delta.type == "text_delta" and event.delta.text:
                            yield StreamEvent(kind="text_delta", text=event.delta.text)
                    elif event.type == "message_stop":
                        complete = True
                if not complete:
                    # The body ended cleanly but early (proxy cut, broken event): the
                    # answer is partial, and retrying is the right response.
                    raise ModelError(
                        f"{self.name}: stream ended before message_stop",
                        kind="transient",
                        provider=self.name,
                    )
                final = await stream.get_final_message()
        except ModelError:
            raise
        except Exception as exc:
            raise map_anthropic_error(exc, provider=self.name) from exc
        yield StreamEvent(kind="done", response=_to_response(final, request))

    async def _stream_lean(
        self, request: ModelRequest, lean: LeanEndpoint
    ) -> AsyncIterator[StreamEvent]:
        """:meth:`stream` as one POST on the shared aiohttp session (see ``http``): its
        server-sent events read as they arrive, each event's JSON folded into the message
        by :class:`_MessageStream`. Failures are classified as the SDK's are: a status, an
        ``error`` event inside the stream (``overloaded_error`` mid-answer: overloaded), a
        cut connection or a stream that ends before ``message_stop`` (transient), a
        malformed event (transient)."""
        import aiohttp

        acc = _MessageStream(model=request.model)
        body = json.dumps({**_request_params(request), "stream": True},
                          ensure_ascii=False).encode()
        try:
            async with lean.post(body) as resp:
                if not 200 <= resp.status < 300:
                    raw = await resp.read()
                    raise map_anthropic_status(status=resp.status, raw=raw, headers=resp.headers,
                                               provider=self.name) from HTTPStatus(resp.status)
                async for name, data in sse_events(resp.content):
                    if name == "ping":
                        continue
                    if name == "error":
                        raise map_anthropic_stream_error(data, headers=resp.headers,
                                                         provider=self.name)
                    event = json.loads(data)
                    if not isinstance(event, dict):
                        raise ValueError(  # masked, then cut
                            f"a stream event is not an object: {redact_text(data)[:80]!r}")
                    event_type = event.get("type")
                    if event_type == "error":  # an error event whose name a proxy lost
                        raise map_anthropic_stream_error(data, headers=resp.headers,
                                                         provider=self.name)
                    out = acc.feed(event_type, event)
                    if out is not None:
                        yield out
                    if acc.stopped:
                        break
        except ModelError:
            raise
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise transport_error(self.name, exc) from exc
        except MALFORMED as exc:
            raise malformed_error(self.name, exc) from exc
        if not acc.stopped:
            raise ModelError(f"{self.name}: stream ended before message_stop",
                             kind="transient", provider=self.name)
        yield StreamEvent(kind="done", response=acc.response())


# --- request -------------------------------------------------------------------------------


def _request_params(request: ModelRequest) -> dict[str, Any]:
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": [_message_param(m) for m in request.messages],
    }
    if request.system:
        params["system"] = request.system
    if request.tools:
        params["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ]
        choice = _tool_choice(request.tool_choice)
        if choice is not None:
            params["tool_choice"] = choice
    return params


def _tool_choice(choice: str) -> dict[str, str] | None:
    if choice == "auto":
        return None  # the API default; sending nothing keeps older endpoints happy
    if choice == "none":
        return {"type": "none"}
    if choice in ("required", "any"):
        return {"type": "any"}
    raise ValueError(f"unsupported tool_choice {choice!r} (expected auto, none or required)")


def _message_param(message: Message) -> dict[str, Any]:
    # Another vendor's opaque reasoning items mean nothing here and are not sent.
    blocks = [b for b in message.content if not isinstance(b, ReasoningBlock)]
    return {"role": message.role, "content": [_block_param(b) for b in blocks]}


def _block_param(block: ContentBlock) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageBlock):
        return _image_param(block)
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, ToolResultBlock):
        return _tool_result_param(block)
    raise TypeError(f"no Anthropic shape for a {block.type} block")


def _image_param(block: ImageBlock) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": block.media_type, "data": block.data},
    }


def _tool_result_param(block: ToolResultBlock) -> dict[str, Any]:
    content: list[dict[str, Any]] = [
        {"type": "text", "text": b.text} if isinstance(b, TextBlock) else _image_param(b)
        for b in block.content
    ]
    param: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": block.tool_use_id,
        "content": content,
    }
    if block.is_error:
        param["is_error"] = True
    return param


# --- response ------------------------------------------------------------------------------


def _to_response(message: anthropic.types.Message, request: ModelRequest) -> ModelResponse:
    blocks: list[ContentBlock] = []
    for block in message.content:
        if block.type == "text":
            blocks.append(TextBlock(text=block.text))
        elif block.type == "tool_use":
            raw_input: Any = block.input
            tool_input = raw_input if isinstance(raw_input, dict) else {"value": raw_input}
            blocks.append(ToolUseBlock(id=block.id, name=block.name, input=tool_input))
        # thinking / server-tool blocks are not part of the neutral model; dropped on purpose
    stop = _stop_reason(message.stop_reason, has_tool_use=any(b.type == "tool_use" for b in blocks))
    return ModelResponse(
        message=Message(role="assistant", content=blocks),
        stop_reason=stop,
        usage=_usage(message.usage),
        model=message.model or request.model,
    )


def _stop_reason(raw: str | None, *, has_tool_use: bool) -> StopReason:
    if raw is None:
        return "tool_use" if has_tool_use else "end_turn"
    mapped = _STOP_REASONS.get(raw)
    if mapped is None:
        log.warning("unknown_stop_reason", provider="anthropic", stop_reason=raw)
        return "tool_use" if has_tool_use else "end_turn"
    return mapped


@dataclass
class _Block:
    """One content block as it streams: text, or a tool call and its JSON arguments."""

    type: str
    text: list[str] = field(default_factory=list)
    id: str = ""
    name: str = ""
    input: Any = None
    arguments: list[str] = field(default_factory=list)


@dataclass
class _MessageStream:
    """Folds the Messages API's stream events (as JSON) into one response: what the SDK's
    ``MessageStream`` accumulates, without a model per event. Thinking blocks are read and
    dropped, as :func:`_to_response` drops them; unknown event and delta types are skipped
    (the API adds new ones; the SDK passes them on unused)."""

    model: str
    blocks: dict[int, _Block] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None
    stopped: bool = False

    def feed(self, event_type: object, event: dict[str, Any]) -> StreamEvent | None:
        if event_type == "content_block_delta":
            delta = event["delta"]
            kind = delta.get("type")
            block = self.blocks[event["index"]]
            if kind == "text_delta":
                text = delta["text"]
                block.text.append(text)
                if text:
                    return StreamEvent(kind="text_delta", text=text)
            elif kind == "input_json_delta":
                block.arguments.append(delta["partial_json"])
            return None  # thinking_delta, signature_delta, citations_delta, ...
        if event_type == "content_block_start":
            start = event["content_block"]
            block = _Block(type=str(start.get("type")))
            self.blocks[event["index"]] = block
            if block.type == "text":
                if start.get("text"):
                    block.text.append(start["text"])
            elif block.type == "tool_use":
                block.id, block.name = str(start["id"]), str(start["name"])
                block.input = start.get("input")
                return StreamEvent(kind="tool_use_start", tool_name=block.name)
        elif event_type == "message_start":
            message = event["message"]
            self.model = message.get("model") or self.model
            self.usage = dict(message.get("usage") or {})
        elif event_type == "message_delta":
            self.stop_reason = (event.get("delta") or {}).get("stop_reason") or self.stop_reason
            # output_tokens replaces message_start's placeholder; the API may also restate
            # the input and cache counts here (the SDK takes every one given)
            for key, value in (event.get("usage") or {}).items():
                if value is not None:
                    self.usage[key] = value
        elif event_type == "message_stop":
            self.stopped = True
        return None

    def response(self) -> ModelResponse:
        blocks: list[ContentBlock] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.type == "text":
                blocks.append(TextBlock(text="".join(block.text)))
            elif block.type == "tool_use":
                blocks.append(ToolUseBlock(id=block.id, name=block.name,
                                           input=_tool_input(block)))
        has_tool_use = any(isinstance(b, ToolUseBlock) for b in blocks)
        u = self.usage
        cached = int(u.get("cache_creation_input_tokens") or 0) + int(
            u.get("cache_read_input_tokens") or 0)
        return ModelResponse(
            message=Message(role="assistant", content=blocks),
            stop_reason=_stop_reason(self.stop_reason, has_tool_use=has_tool_use),
            usage=Usage(input_tokens=int(u.get("input_tokens") or 0) + cached,
                        output_tokens=int(u.get("output_tokens") or 0)),
            model=self.model,
        )


def _tool_input(block: _Block) -> dict[str, Any]:
    """A streamed tool call's arguments: its JSON fragments joined (none: the start's input);
    a value that is not an object as :func:`_to_response` wraps one. Fragments that are not
    JSON (a stream cut at ``max_tokens`` mid-call) go on under ``INVALID_ARGUMENTS_KEY``, so
    schema validation refuses the call and the model learns why, instead of the turn
    failing."""
    raw = "".join(block.arguments)
    if not raw.strip():
        value: Any = block.input if block.input is not None else {}
    else:
        try:
            value = json.loads(raw)
        except ValueError:
            log.warning("tool_arguments_not_json", tool=block.name, length=len(raw))
            return {INVALID_ARGUMENTS_KEY: raw}
    return value if isinstance(value, dict) else {"value": value}


def _usage(usage: anthropic.types.Usage) -> Usage:
    # Anthropic's input_tokens excludes cached prompt tokens; the loop budgets the whole prompt.
    cached = (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
    return Usage(input_tokens=(usage.input_tokens or 0) + cached, output_tokens=usage.output_tokens)
