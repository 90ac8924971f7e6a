"""Helpers for the provider tests (a uniquely named module: ``conftest`` names collide)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from geode.messages import Message, ToolSpec
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
    """One vendor's fake server and the adapter pointed at it."""

    vendor: str
    server: FakeModelServer
    provider: BaseProvider

    def body(self, index: int = -1) -> dict[str, Any]:
        body = self.server.generate_requests[index].body
        assert isinstance(body, dict)
        return body


def make_provider(vendor: str, server: FakeModelServer, *, timeout: float = 10.0) -> BaseProvider:
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
