"""Fixtures for the provider tests: real SDK clients against the wire-level fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from prov_helpers import Harness, make_provider, make_server

from geode.testing.fake_anthropic import FakeAnthropicServer
from geode.testing.fake_openai import FakeOpenAIServer


@pytest.fixture(params=["anthropic", "anthropic-lean", "openai", "openai-lean", "responses"])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    vendor, _, variant = str(request.param).partition("-")
    lean = variant == "lean"  # through the runtime's shared session (not the SDK's request)
    async with make_server(vendor) as server:
        provider = make_provider(vendor, server, lean=lean)
        try:
            yield Harness(vendor, server, provider, lean=lean)
        finally:
            await provider.aclose()


@pytest.fixture
async def anthropic_harness() -> AsyncIterator[Harness]:
    async with FakeAnthropicServer() as server:
        provider = make_provider("anthropic", server)
        yield Harness("anthropic", server, provider)
        await provider.aclose()


@pytest.fixture
async def openai_harness() -> AsyncIterator[Harness]:
    async with FakeOpenAIServer() as server:
        provider = make_provider("openai", server)
        yield Harness("openai", server, provider)
        await provider.aclose()
