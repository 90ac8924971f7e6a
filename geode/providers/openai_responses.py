"""Adapter for the OpenAI Responses API (``POST /responses``) through ``openai.AsyncOpenAI``.

Serves OpenAI's own endpoint (the pay-as-you-go path) and, with a :class:`CodexLogin`, the
Codex-subscription endpoint. Compatible endpoints (GLM, OpenRouter, ``openai:`` with a base
URL) keep Chat Completions (:mod:`geode.providers.openai_compat`).

Requests are stateless (``store: false``): GEODE holds the conversation. Reasoning items come
back encrypted (``include: ["reasoning.encrypted_content"]``), are kept in the assistant
message as :class:`ReasoningBlock` and are sent back on the next call, so the model keeps its
chain of thought across tool rounds and turns.

The Codex-subscription backend differs from the public API in ways its own CLI follows: it
only streams, it needs ``instructions`` and a list ``input``, it refuses
``max_output_tokens``, and it wants the ChatGPT account id header.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import openai
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
from geode.providers._errors import map_openai_error
from geode.providers.base import BaseProvider, ModelRequest
from geode.providers.openai_compat import INVALID_ARGUMENTS_KEY

if TYPE_CHECKING:
    from geode.providers.codex_auth import CodexLogin

__all__ = ["REASONING_PROVIDER", "OpenAIResponsesProvider"]

log = structlog.get_logger(__name__)

#: ``ReasoningBlock.provider`` of the items this adapter produces and sends back
REASONING_PROVIDER = "openai-responses"
#: keys of a reasoning item that are sent back (the rest is per-response decoration)
_REASONING_KEYS = ("type", "id", "summary", "encrypted_content")
#: key in ``ReasoningBlock.data`` naming the endpoint and model it came from (never sent)
_ORIGIN = "geode_origin"
#: placeholder key for the SDK when the Codex login supplies the bearer token per request
_CODEX_PLACEHOLDER_KEY = "codex-login"


class OpenAIResponsesProvider(BaseProvider):
    """Calls ``/responses``; translates to and from :mod:`geode.messages`.

    Args:
        provider_name: ``openai`` (names the env var in auth errors) or ``codex``.
        api_key: the key; None only with ``codex``.
        base_url: the URL ending in ``/v1`` (public API) or ``.../backend-api/codex``.
        timeout: seconds per network read/write.
        codex: the Codex CLI login; selects the Codex-subscription request shape.
        client: a shared SDK client (:class:`~geode.providers._clients.ClientCache`); the
            cache owns it, so :meth:`aclose` leaves it open. Without one the adapter builds
            and owns its own.
        encrypted_reasoning: ask for encrypted reasoning items (catalog models all reason;
            the API refuses the request for a model that does not, e.g. an ``openai:`` id).
    """

    def __init__(
        self,
        *,
        provider_name: str = "openai",
        api_key: str | None,
        base_url: str | None = None,
        timeout: float = 120.0,
        codex: CodexLogin | None = None,
        client: openai.AsyncOpenAI | None = None,
        encrypted_reasoning: bool = True,
    ) -> None:
        if api_key is None and codex is None:
            raise ValueError("OpenAIResponsesProvider needs an api_key or a Codex login")
        self.name = provider_name
        self._codex = codex
        self._encrypted_reasoning = encrypted_reasoning or codex is not None
        self._owns_client = client is None
        # max_retries=0: retries are the loop's explicit policy (geode.providers.retry).
        self._client = client or openai.AsyncOpenAI(
            api_key=api_key or _CODEX_PLACEHOLDER_KEY,
            base_url=base_url,
            timeout=openai.Timeout(timeout, connect=min(10.0, timeout)),
            max_retries=0,
        )

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.close()
        if self._codex is not None:
            await self._codex.aclose()

    # --- calls ---------------------------------------------------------------------------

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if self._codex is not None:
            # The subscription backend only answers with a stream: fold it.
            final: ModelResponse | None = None
            async for event in self.stream(request):
                if event.kind == "done":
                    final = event.response
            assert final is not None  # stream() always ends with done or raises
            return final
        try:
            response = await self._client.responses.create(**self._params(request))
        except Exception as exc:
            raise map_openai_error(exc, provider=self.name) from exc
        _raise_if_failed(response, self.name)
        return _build_response(
            items=list(response.output or []),
            status=response.status,
            incomplete_reason=_incomplete_reason(response),
            usage=_usage(response.usage),
            model=response.model or request.model,
            origin=_origin(self.name, request.model),
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        acc = _StreamAccumulator(
            model=request.model, provider=self.name, origin=_origin(self.name, request.model)
        )
        params = self._params(request)
        params["stream"] = True
        try:
            events = await self._create_stream(params)
            async with events:
                async for event in events:
                    for out in acc.feed(event):
                        yield out
        except ModelError:
            raise
        except Exception as exc:
            raise self._map_error(exc) from exc
        if acc.final is None:
            # Every complete stream ends with response.completed / .incomplete.
            raise ModelError(
                f"{self.name}: stream ended before the response completed (connection cut?)",
                kind="transient",
                provider=self.name,
            )
        yield StreamEvent(kind="done", response=acc.response())

    async def _create_stream(self, params: dict[str, Any]) -> Any:
        if self._codex is None:
            return await self._client.responses.create(**params)
        headers = await self._codex.request_headers()
        try:
            return await self._client.responses.create(**params, extra_headers=headers)
        except openai.AuthenticationError:
            # The access token may be revoked before its expiry: refresh once, then retry
            # once. A second 401 is the login's problem (raised with the login command).
            headers = await self._codex.request_headers(force_refresh=True)
            return await self._client.responses.create(**params, extra_headers=headers)

    def _map_error(self, exc: BaseException) -> ModelError:
        if self._codex is not None:
            from geode.providers.codex_auth import map_codex_error

            return map_codex_error(exc)
        return map_openai_error(exc, provider=self.name)

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": request.model,
            "input": _input_items(request.messages, _origin(self.name, request.model)),
            "store": False,
        }
        if self._encrypted_reasoning:
            params["include"] = ["reasoning.encrypted_content"]
        if request.system or self._codex is not None:
            params["instructions"] = request.system
        if self._codex is None:
            # The subscription backend manages output length itself and refuses the field.
            params["max_output_tokens"] = request.max_tokens
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                    "strict": False,
                }
                for t in request.tools
            ]
            choice = _tool_choice(request.tool_choice)
            if choice is not None:
                params["tool_choice"] = choice
        return params


# --- request -------------------------------------------------------------------------------


def _tool_choice(choice: str) -> str | None:
    if choice == "auto":
        return None  # the API default
    if choice in ("none", "required"):
        return choice
    if choice == "any":
        return "required"
    raise ValueError(f"unsupported tool_choice {choice!r} (expected auto, none or required)")


def _origin(provider: str, model: str) -> str:
    """Where a reasoning item came from: it is only valid for the same endpoint and model
    (encrypted for that account and model), so after a /model switch it is left out."""
    return f"{provider}:{model}"


def _input_items(messages: tuple[Message, ...], origin: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            items.extend(_assistant_items(message, origin))
        else:
            items.extend(_user_items(message))
    return items


def _assistant_items(message: Message, origin: str) -> list[dict[str, Any]]:
    """Block order is kept: reasoning, then the text and calls it led to."""
    items: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ReasoningBlock):
            if block.provider == REASONING_PROVIDER and block.data.get(_ORIGIN, origin) == origin:
                items.append({k: block.data[k] for k in _REASONING_KEYS if k in block.data})
        elif isinstance(block, TextBlock):
            if block.text:
                items.append({"role": "assistant", "content": block.text})
        elif isinstance(block, ToolUseBlock):
            items.append(
                {
                    "type": "function_call",
                    "call_id": block.id,
                    "name": block.name,
                    "arguments": json.dumps(block.input),
                }
            )
    return items


def _user_items(message: Message) -> list[dict[str, Any]]:
    """Tool outputs first (they answer the previous calls), then the user's own content."""
    items: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            text = block.text_content
            if block.is_error:
                text = f"[tool error] {text}"
            items.append({"type": "function_call_output", "call_id": block.tool_use_id,
                          "output": text})
            # A function output is text; its images follow as user content.
            parts.extend(_image_part(b) for b in block.content if isinstance(b, ImageBlock))
        elif isinstance(block, TextBlock):
            parts.append({"type": "input_text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append(_image_part(block))
    if parts:
        if all(p["type"] == "input_text" for p in parts):
            items.append({"role": "user", "content": "".join(p["text"] for p in parts)})
        else:
            items.append({"role": "user", "content": parts})
    return items


def _image_part(block: ImageBlock) -> dict[str, Any]:
    return {"type": "input_image", "image_url": f"data:{block.media_type};base64,{block.data}"}


# --- response ------------------------------------------------------------------------------


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    return Usage(
        input_tokens=int(_get(usage, "input_tokens") or 0),
        output_tokens=int(_get(usage, "output_tokens") or 0),
    )


def _incomplete_reason(response: Any) -> str | None:
    details = _get(response, "incomplete_details")
    reason = _get(details, "reason") if details is not None else None
    return str(reason) if reason else None


def _raise_if_failed(response: Any, provider: str) -> None:
    if _get(response, "status") != "failed":
        return
    error = _get(response, "error")
    raise _error_from_body(
        {"code": _get(error, "code"), "message": _get(error, "message") or "response failed"},
        provider,
    )


def _error_from_body(error: dict[str, Any], provider: str) -> ModelError:
    """An error reported inside a 200 (a ``failed`` response or an ``error`` event)."""
    return map_openai_error(
        openai.APIError(str(error.get("message") or "error"), request=_DUMMY_REQUEST,
                        body=error),
        provider=provider,
    )


def _dummy_request() -> Any:
    import httpx2

    return httpx2.Request("POST", "http://responses.invalid/")


_DUMMY_REQUEST = _dummy_request()


def _parse_arguments(name: str, raw: str) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        log.warning("tool_arguments_not_json", tool=name, length=len(raw))
        return {INVALID_ARGUMENTS_KEY: raw}
    return value if isinstance(value, dict) else {INVALID_ARGUMENTS_KEY: raw}


def _build_response(
    *,
    items: list[Any],
    status: str | None,
    incomplete_reason: str | None,
    usage: Usage,
    model: str,
    origin: str,
) -> ModelResponse:
    blocks: list[ContentBlock] = []
    text: list[str] = []
    refused = False
    for item in items:
        kind = _get(item, "type")
        if kind == "reasoning":
            data = item if isinstance(item, dict) else item.model_dump(exclude_none=True)
            kept = {k: data[k] for k in _REASONING_KEYS if k in data}
            kept[_ORIGIN] = origin
            blocks.append(ReasoningBlock(provider=REASONING_PROVIDER, data=kept))
        elif kind == "message":
            for part in _get(item, "content") or []:
                part_type = _get(part, "type")
                if part_type == "output_text":
                    text.append(str(_get(part, "text") or ""))
                elif part_type == "refusal":
                    refused = True
                    text.append(str(_get(part, "refusal") or ""))
        elif kind == "function_call":
            name = str(_get(item, "name") or "")
            blocks.append(
                ToolUseBlock(
                    id=str(_get(item, "call_id") or _get(item, "id") or ""),
                    name=name,
                    input=_parse_arguments(name, str(_get(item, "arguments") or "")),
                )
            )
        # hosted-tool items (web search, ...) are not requested and not part of the model
    joined = "".join(text)
    calls = [b for b in blocks if isinstance(b, ToolUseBlock)]
    # Text goes before the calls, as in the other adapters; reasoning stays first.
    ordered: list[ContentBlock] = [b for b in blocks if isinstance(b, ReasoningBlock)]
    if joined:
        ordered.append(TextBlock(text=joined))
    ordered.extend(calls)
    return ModelResponse(
        message=Message(role="assistant", content=ordered),
        stop_reason=_stop_reason(status, incomplete_reason, has_calls=bool(calls),
                                 refused=refused),
        usage=usage,
        model=model,
    )


def _stop_reason(
    status: str | None, incomplete_reason: str | None, *, has_calls: bool, refused: bool
) -> StopReason:
    if status == "incomplete":
        if incomplete_reason == "max_output_tokens":
            return "max_tokens"
        if incomplete_reason == "content_filter":
            return "refusal"
        log.warning("unknown_incomplete_reason", reason=incomplete_reason)
        return "max_tokens"
    if has_calls:
        return "tool_use"
    if refused:
        return "refusal"
    return "end_turn"


@dataclass
class _StreamAccumulator:
    """Folds Responses stream events into one response, emitting StreamEvents."""

    model: str
    provider: str
    origin: str
    items: dict[int, Any] = field(default_factory=dict)
    final: Any = None

    def feed(self, event: Any) -> list[StreamEvent]:
        kind = _get(event, "type")
        if kind == "response.output_text.delta":
            delta = str(_get(event, "delta") or "")
            return [StreamEvent(kind="text_delta", text=delta)] if delta else []
        if kind == "response.output_item.added":
            item = _get(event, "item")
            if _get(item, "type") == "function_call":
                return [StreamEvent(kind="tool_use_start", tool_name=str(_get(item, "name")))]
            return []
        if kind == "response.output_item.done":
            self.items[int(_get(event, "output_index") or 0)] = _get(event, "item")
            return []
        if kind in ("response.completed", "response.incomplete"):
            self.final = _get(event, "response")
            return []
        if kind == "response.failed":
            _raise_if_failed(_get(event, "response"), self.provider)
            raise ModelError(f"{self.provider}: response failed", kind="fatal",
                             provider=self.provider)
        if kind == "error":
            raise _error_from_body(
                {"code": _get(event, "code"), "message": _get(event, "message")}, self.provider
            )
        return []

    def response(self) -> ModelResponse:
        final = self.final
        # The subscription backend may leave ``output`` empty in the final event: the items
        # streamed one by one are the answer.
        items = [self.items[i] for i in sorted(self.items)] or list(_get(final, "output") or [])
        return _build_response(
            items=items,
            status=_get(final, "status"),
            incomplete_reason=_incomplete_reason(final),
            usage=_usage(_get(final, "usage")),
            model=str(_get(final, "model") or self.model),
            origin=self.origin,
        )
