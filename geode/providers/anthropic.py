"""Adapter for the Anthropic Messages API through ``anthropic.AsyncAnthropic``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

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
from geode.providers._errors import map_anthropic_error
from geode.providers.base import BaseProvider, ModelRequest

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
    """

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 120.0,
        provider_name: str = "anthropic",
        client: anthropic.AsyncAnthropic | None = None,
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


def _usage(usage: anthropic.types.Usage) -> Usage:
    # Anthropic's input_tokens excludes cached prompt tokens; the loop budgets the whole prompt.
    cached = (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
    return Usage(input_tokens=(usage.input_tokens or 0) + cached, output_tokens=usage.output_tokens)
