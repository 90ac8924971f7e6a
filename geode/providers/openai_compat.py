"""Adapter for OpenAI-compatible Chat Completions endpoints through ``openai.AsyncOpenAI``.

Serves OpenAI itself, GLM (Z.ai), OpenRouter and any ``provider:model`` endpoint that
speaks the Chat Completions wire format (vLLM, Ollama, llama.cpp, LiteLLM, ...).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import openai
import structlog
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from geode.errors import ModelError
from geode.messages import (
    ContentBlock,
    ImageBlock,
    Message,
    ModelResponse,
    StopReason,
    StreamEvent,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from geode.providers._errors import (
    map_openai_error,
    map_openai_status,
    map_openai_stream_error,
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

__all__ = ["INVALID_ARGUMENTS_KEY", "OpenAICompatProvider"]

log = structlog.get_logger(__name__)

TokenLimitField = Literal["max_tokens", "max_completion_tokens"]

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


class OpenAICompatProvider(BaseProvider):
    """Calls a Chat Completions endpoint; translates to and from :mod:`geode.messages`.

    Args:
        provider_name: catalog provider (``openai``, ``glm``, ``openrouter``); names the
            env var in auth errors.
        api_key: the key (local servers accept any non-empty string).
        base_url: the URL ending in ``/v1`` (or the vendor's equivalent).
        timeout: seconds per network read/write.
        token_limit_field: request field for ``max_tokens``. OpenAI's current models only
            accept ``max_completion_tokens``; most compatible servers only ``max_tokens``.
            Default: the former for ``openai`` on api.openai.com, else the latter.
        client: a shared SDK client (:class:`~geode.providers._clients.ClientCache`); the
            cache owns it, so :meth:`aclose` leaves it open. Without one the adapter builds
            and owns its own.
        http: the runtime's :class:`~geode.providers._clients.ClientCache`: given, a
            non-streamed call is one plain POST of the wire JSON on its shared aiohttp
            session (:meth:`~geode.providers._clients.ClientCache.http`), its answer read as
            JSON (the SDK's request building and response models cost ~0.8 ms of CPU per
            call, five times the POST itself); errors are classified as the SDK's are. A
            streamed call reads the same way: the server-sent events of one POST, each
            chunk one ``json.loads`` (the SDK builds a pydantic model per chunk: ~0.8 ms
            of CPU each, ~320 ms for an answer of 400 tokens).
    """

    def __init__(
        self,
        *,
        provider_name: str,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 120.0,
        token_limit_field: TokenLimitField | None = None,
        client: openai.AsyncOpenAI | None = None,
        http: ClientCache | None = None,
    ) -> None:
        self.name = provider_name
        if token_limit_field is None:
            official = base_url is None or "api.openai.com" in base_url
            token_limit_field = (
                "max_completion_tokens" if provider_name == "openai" and official else "max_tokens"
            )
        self._token_field: TokenLimitField = token_limit_field
        self._owns_client = client is None
        # max_retries=0: retries are the loop's explicit policy (geode.providers.retry).
        self._client = client or openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            timeout=openai.Timeout(timeout, connect=min(10.0, timeout)),
            max_retries=0,
        )
        self._lean: LeanEndpoint | None = None
        if http is not None:
            c = self._client
            # The SDK's own headers (user agent, organization/project), and its bearer auth
            self._lean = LeanEndpoint.of(
                http, url=f"{str(c.base_url).rstrip('/')}/chat/completions",
                headers={**c.default_headers, "Authorization": f"Bearer {c.api_key}"},
                timeout=timeout)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.close()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if self._lean is not None:
            return await self._complete_lean(request, self._lean)
        try:
            completion: ChatCompletion = await self._post(self._params(request), stream=False)
        except Exception as exc:
            raise map_openai_error(exc, provider=self.name) from exc
        if not completion.choices:
            # OpenRouter and some proxies answer 200 with no choice when upstream failed.
            raise ModelError(
                f"{self.name}: response had no choices", kind="transient", provider=self.name
            )
        choice = completion.choices[0]
        calls = [
            _PendingCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "")
            for c in choice.message.tool_calls or []
            if c.type == "function"
        ]
        usage = completion.usage
        return _build_response(
            text=choice.message.content or "",
            calls=calls,
            finish_reason=choice.finish_reason,
            usage=Usage(
                input_tokens=usage.prompt_tokens if usage else 0,
                output_tokens=usage.completion_tokens if usage else 0,
            ),
            model=completion.model or request.model,
        )

    async def _complete_lean(self, request: ModelRequest, lean: LeanEndpoint) -> ModelResponse:
        """:meth:`complete` as one POST on the shared aiohttp session (see ``http``)."""
        import aiohttp

        body = json.dumps(self._params(request), ensure_ascii=False).encode()
        try:
            async with lean.post(body) as resp:
                raw = await resp.read()
                status, headers = resp.status, resp.headers
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise transport_error(self.name, exc) from exc
        if not 200 <= status < 300:
            failure = HTTPStatus(status)
            raise map_openai_status(status=status, raw=raw, headers=headers,
                                    provider=self.name) from failure
        try:
            data = json.loads(raw)
            choices = data.get("choices") or []
            choice = choices[0] if choices else None
            message = choice.get("message") or {} if choice is not None else {}
            calls = [
                _PendingCall(id=str(c.get("id") or ""), name=str(c["function"].get("name") or ""),
                             arguments=c["function"].get("arguments") or "")
                for c in message.get("tool_calls") or []
                if c.get("type", "function") == "function" and isinstance(c.get("function"), dict)
            ]
            usage = data.get("usage") or {}
            tokens = Usage(input_tokens=int(usage.get("prompt_tokens") or 0),
                           output_tokens=int(usage.get("completion_tokens") or 0))
        except MALFORMED as exc:
            raise malformed_error(self.name, exc) from exc
        if choice is None:
            # OpenRouter and some proxies answer 200 with no choice when upstream failed.
            raise ModelError(f"{self.name}: response had no choices", kind="transient",
                             provider=self.name)
        return _build_response(
            text=message.get("content") or "", calls=calls,
            finish_reason=choice.get("finish_reason"), usage=tokens,
            model=data.get("model") or request.model,
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        acc = _StreamAccumulator(model=request.model)
        params = self._params(request)
        params["stream"] = True
        params["stream_options"] = {"include_usage": True}
        if self._lean is not None:
            async for event in self._stream_lean(params, acc, self._lean):
                yield event
            return
        try:
            chunks: openai.AsyncStream[ChatCompletionChunk] = await self._post(params, stream=True)
            async with chunks:
                async for chunk in chunks:
                    for event in acc.feed(chunk):
                        yield event
        except Exception as exc:
            raise map_openai_error(exc, provider=self.name) from exc
        if acc.finish_reason is None:
            # Every complete stream ends with a finish_reason; without it the answer is cut.
            raise ModelError(
                f"{self.name}: stream ended before a finish_reason (connection cut?)",
                kind="transient",
                provider=self.name,
            )
        yield StreamEvent(kind="done", response=acc.response())

    async def _stream_lean(
        self, params: dict[str, Any], acc: _StreamAccumulator, lean: LeanEndpoint
    ) -> AsyncIterator[StreamEvent]:
        """:meth:`stream` as one POST on the shared aiohttp session (see ``http``): its
        server-sent events read line by line, each chunk's JSON fed to ``acc`` as it is.
        Failures are classified as the SDK's are (a status, an error object inside the
        stream, a cut connection, a malformed chunk)."""
        import aiohttp

        body = json.dumps(params, ensure_ascii=False).encode()
        try:
            async with lean.post(body) as resp:
                if not 200 <= resp.status < 300:
                    raw = await resp.read()
                    raise map_openai_status(status=resp.status, raw=raw, headers=resp.headers,
                                            provider=self.name) from HTTPStatus(resp.status)
                async for _, data in sse_events(resp.content):
                    if data.startswith("[DONE]"):
                        break
                    chunk = json.loads(data)
                    if not isinstance(chunk, dict):
                        raise ValueError(  # masked, then cut
                            f"a stream chunk is not an object: {redact_text(data)[:80]!r}")
                    if chunk.get("error"):
                        raise map_openai_stream_error(chunk["error"], provider=self.name)
                    for event in acc.feed_json(chunk):
                        yield event
        except ModelError:
            raise
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise transport_error(self.name, exc) from exc
        except MALFORMED as exc:
            raise malformed_error(self.name, exc) from exc
        if acc.finish_reason is None:
            raise ModelError(
                f"{self.name}: stream ended before a finish_reason (connection cut?)",
                kind="transient", provider=self.name)
        yield StreamEvent(kind="done", response=acc.response())

    async def _post(self, params: dict[str, Any], *, stream: bool) -> Any:
        """``chat.completions.create(**params)`` minus its parameter transform.

        ``create`` walks every request, the whole conversation, through the SDK's recursive
        TypedDict transform (aliases, dates, files): ~7% of ``geode serve``'s CPU in a
        one-chat benchmark. These params already are the wire JSON (strings, numbers, plain
        dicts and lists), so they go to the SDK's documented low-level ``post`` with
        ``create``'s path, auth option and response types; retries, errors and parsing stay
        the SDK's.
        """
        return await self._client.post(
            "/chat/completions",
            body=params,
            cast_to=ChatCompletion,
            options={"security": {"bearer_auth": True}},
            stream=stream,
            stream_cls=openai.AsyncStream[ChatCompletionChunk],
        )

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": request.model,
            "messages": _messages_param(request.system, request.messages),
            self._token_field: request.max_tokens,
        }
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
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
        return None  # the API default; some compatible servers reject an explicit value
    if choice in ("none", "required"):
        return choice
    if choice == "any":
        return "required"
    raise ValueError(f"unsupported tool_choice {choice!r} (expected auto, none or required)")


def _messages_param(system: str, messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        if message.role == "assistant":
            out.append(_assistant_param(message))
        else:
            out.extend(_user_params(message))
    return out


def _assistant_param(message: Message) -> dict[str, Any]:
    text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
    param: dict[str, Any] = {"role": "assistant", "content": text or None}
    if message.tool_uses:
        param["tool_calls"] = [
            {
                "id": b.id,
                "type": "function",
                "function": {"name": b.name, "arguments": json.dumps(b.input)},
            }
            for b in message.tool_uses
        ]
    return param


def _user_params(message: Message) -> list[dict[str, Any]]:
    """One neutral user message → ``tool`` messages first, then the user's own content.

    Invariant: ``tool`` messages must directly follow the assistant message that holds
    their ``tool_calls``, so they are emitted before any other content of the turn.
    """
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            text = block.text_content
            if block.is_error:
                # Chat Completions has no error flag; the model must still learn the call failed.
                text = f"[tool error] {text}"
            out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": text})
            # A ``tool`` message cannot carry images; they follow as user content.
            parts.extend(_image_part(b) for b in block.content if isinstance(b, ImageBlock))
        elif isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append(_image_part(block))
    if parts:
        if all(p["type"] == "text" for p in parts):
            # Plain string content: accepted by every compatible server, unlike part lists.
            out.append({"role": "user", "content": "".join(p["text"] for p in parts)})
        else:
            out.append({"role": "user", "content": parts})
    return out


def _image_part(block: ImageBlock) -> dict[str, Any]:
    url = f"data:{block.media_type};base64,{block.data}"
    return {"type": "image_url", "image_url": {"url": url}}


# --- response ------------------------------------------------------------------------------


@dataclass
class _PendingCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


def _parse_arguments(call: _PendingCall) -> dict[str, Any]:
    if not call.arguments.strip():
        return {}
    try:
        value = json.loads(call.arguments)
    except json.JSONDecodeError:
        log.warning("tool_arguments_not_json", tool=call.name, length=len(call.arguments))
        return {INVALID_ARGUMENTS_KEY: call.arguments}
    return value if isinstance(value, dict) else {INVALID_ARGUMENTS_KEY: call.arguments}


def _build_response(
    *, text: str, calls: list[_PendingCall], finish_reason: str | None, usage: Usage, model: str
) -> ModelResponse:
    blocks: list[ContentBlock] = []
    if text:
        blocks.append(TextBlock(text=text))
    blocks.extend(ToolUseBlock(id=c.id, name=c.name, input=_parse_arguments(c)) for c in calls)
    return ModelResponse(
        message=Message(role="assistant", content=blocks),
        stop_reason=_stop_reason(finish_reason, has_tool_calls=bool(calls)),
        usage=usage,
        model=model,
    )


def _stop_reason(raw: str | None, *, has_tool_calls: bool) -> StopReason:
    if raw == "length":
        return "max_tokens"
    # Some compatible servers (Ollama, older vLLM) report "stop" alongside tool calls.
    if has_tool_calls:
        return "tool_use"
    if raw is None:
        return "end_turn"
    mapped = _FINISH_REASONS.get(raw)
    if mapped is None:
        log.warning("unknown_stop_reason", finish_reason=raw)
        return "end_turn"
    return mapped


@dataclass
class _StreamAccumulator:
    """Folds ``chat.completion.chunk`` deltas into one response, emitting StreamEvents."""

    model: str
    text: list[str] = field(default_factory=list)
    calls: dict[int, _PendingCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)

    def feed(self, chunk: Any) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        if chunk.model:
            self.model = chunk.model
        if chunk.usage is not None:
            self.usage = Usage(
                input_tokens=chunk.usage.prompt_tokens or 0,
                output_tokens=chunk.usage.completion_tokens or 0,
            )
        for choice in chunk.choices or []:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None and delta.content:
                self.text.append(delta.content)
                events.append(StreamEvent(kind="text_delta", text=delta.content))
            for tc in (delta.tool_calls if delta is not None else None) or []:
                # Parallel calls interleave by ``index``; id and name arrive in the first delta.
                call = self.calls.setdefault(tc.index, _PendingCall())
                if tc.id:
                    call.id = tc.id
                if tc.function is not None:
                    if tc.function.name and not call.name:
                        call.name = tc.function.name
                        events.append(StreamEvent(kind="tool_use_start", tool_name=call.name))
                    if tc.function.arguments:
                        call.arguments += tc.function.arguments
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        return events

    def feed_json(self, chunk: dict[str, Any]) -> list[StreamEvent]:
        """:meth:`feed` for a chunk as its JSON (the lean path: no model built per chunk)."""
        events: list[StreamEvent] = []
        if chunk.get("model"):
            self.model = chunk["model"]
        usage = chunk.get("usage")
        if usage is not None:
            self.usage = Usage(input_tokens=usage.get("prompt_tokens") or 0,
                               output_tokens=usage.get("completion_tokens") or 0)
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content:
                self.text.append(content)
                events.append(StreamEvent(kind="text_delta", text=content))
            for tc in delta.get("tool_calls") or ():
                call = self.calls.setdefault(tc.get("index", 0), _PendingCall())
                if tc.get("id"):
                    call.id = tc["id"]
                function = tc.get("function")
                if function:
                    name = function.get("name")
                    if name and not call.name:
                        call.name = name
                        events.append(StreamEvent(kind="tool_use_start", tool_name=name))
                    if function.get("arguments"):
                        call.arguments += function["arguments"]
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return events

    def response(self) -> ModelResponse:
        return _build_response(
            text="".join(self.text),
            calls=[self.calls[i] for i in sorted(self.calls)],
            finish_reason=self.finish_reason,
            usage=self.usage,
            model=self.model,
        )
