"""Helpers for the provider tests (a uniquely named module: ``conftest`` names collide)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from geode.messages import Message, ToolSpec
from geode.providers._clients import ClientCache
from geode.providers.anthropic import AnthropicProvider
from geode.providers.base import BaseProvider, ModelRequest
from geode.providers.openai_compat import OpenAICompatProvider
from geode.providers.openai_responses import OpenAIResponsesProvider
from geode.testing._sse import FakeModelServer
from geode.testing.fake_anthropic import FakeAnthropicServer
from geode.testing.fake_openai import FakeOpenAIServer
from geode.testing.fake_openai_responses import FakeResponsesServer

API_KEY = "test-key-SECRET-123"

READ_FILE = ToolSpec(
    name="read_file",
    description="Read a file.",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
)


def make_request(
    *messages: Message,
    tools: tuple[ToolSpec, ...] = (),
    tool_choice: str = "auto",
    system: str = "You are terse.",
    model: str = "fake-model",
) -> ModelRequest:
    return ModelRequest(
        model=model,
        system=system,
        messages=messages or (Message.user("hi"),),
        tools=tools,
        tool_choice=tool_choice,
        max_tokens=256,
    )


@dataclass
class Harness:
    """One vendor's fake server and the adapter pointed at it (``lean``: the adapter's own
    POST on the runtime's shared session, not the SDK's request: every Chat Completions
    call, an Anthropic streamed call)."""

    vendor: str
    server: FakeModelServer
    provider: BaseProvider
    lean: bool = False

    def body(self, index: int = -1) -> dict[str, Any]:
        body = self.server.generate_requests[index].body
        assert isinstance(body, dict)
        return body


class _LeanProvider(OpenAICompatProvider):
    """The adapter as a runtime builds it (shared SDK client and aiohttp session of a
    ClientCache); closing it closes that cache."""

    def __init__(self, server: FakeModelServer, timeout: float) -> None:
        self.cache = ClientCache()
        super().__init__(
            provider_name="openai", api_key=API_KEY, base_url=server.base_url, timeout=timeout,
            client=self.cache.openai(api_key=API_KEY, base_url=server.base_url,
                                     timeout=timeout),
            http=self.cache,
        )

    async def aclose(self) -> None:
        await super().aclose()
        await self.cache.aclose()


class _LeanAnthropic(AnthropicProvider):
    """The Anthropic adapter as a runtime builds it (a streamed call on the ClientCache's
    shared aiohttp session); closing it closes that cache."""

    def __init__(self, server: FakeModelServer, timeout: float) -> None:
        self.cache = ClientCache()
        super().__init__(
            api_key=API_KEY, base_url=server.base_url, timeout=timeout,
            client=self.cache.anthropic(api_key=API_KEY, base_url=server.base_url,
                                        timeout=timeout),
            http=self.cache,
        )

    async def aclose(self) -> None:
        await super().aclose()
        await self.cache.aclose()


def make_provider(vendor: str, server: FakeModelServer, *, timeout: float = 10.0,
                  lean: bool = False) -> BaseProvider:
    if lean:
        if vendor == "anthropic":
            return _LeanAnthropic(server, timeout)
        return _LeanProvider(server, timeout)
    if vendor == "anthropic":
        return AnthropicProvider(api_key=API_KEY, base_url=server.base_url, timeout=timeout)
    if vendor == "responses":
        return OpenAIResponsesProvider(
            provider_name="openai", api_key=API_KEY, base_url=server.base_url, timeout=timeout
        )
    return OpenAICompatProvider(
        provider_name="openai", api_key=API_KEY, base_url=server.base_url, timeout=timeout
    )


def make_server(vendor: str) -> FakeModelServer:
    if vendor == "responses":
        return FakeResponsesServer()
    return FakeAnthropicServer() if vendor == "anthropic" else FakeOpenAIServer()
