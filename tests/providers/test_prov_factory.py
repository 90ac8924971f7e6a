"""build_provider: the right adapter, required keys, and what reaches the wire."""

from __future__ import annotations

import pytest
from prov_helpers import make_request

from geode.errors import ConfigError
from geode.providers import build_provider, resolve_model
from geode.providers.anthropic import AnthropicProvider
from geode.providers.factory import LOCAL_SERVER_KEY
from geode.providers.openai_compat import OpenAICompatProvider
from geode.providers.openai_responses import OpenAIResponsesProvider
from geode.testing.fake_anthropic import FakeAnthropicServer
from geode.testing.fake_openai import FakeOpenAIServer
from geode.testing.fake_openai_responses import FakeResponsesServer


@pytest.mark.parametrize(
    ("model_id", "env"),
    [
        ("claude-opus-5-5", "ANTHROPIC_API_KEY"),
        ("anthropic:claude-x", "ANTHROPIC_API_KEY"),
        ("gpt-6-sol", "OPENAI_API_KEY"),
        ("openai:llama3.1", "OPENAI_API_KEY"),  # no custom endpoint: the real API needs a key
        ("glm-5.3", "ZAI_API_KEY"),
        ("openrouter/openrouter/auto", "OPENROUTER_API_KEY"),
    ],
)
@pytest.mark.parametrize("key", [None, ""])
def test_missing_key_is_a_config_error_naming_the_variable(
    model_id: str, env: str, key: str | None
) -> None:
    with pytest.raises(ConfigError) as info:
        build_provider(resolve_model(model_id), api_key=key, base_url=None)
    assert env in str(info.value)
    assert model_id in str(info.value)


def test_catalog_openai_model_with_custom_endpoint_still_needs_a_key() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        build_provider(resolve_model("gpt-6-sol"), api_key=None, base_url="http://127.0.0.1:1/v1")


def test_scripted_provider_is_not_built_from_configuration() -> None:
    with pytest.raises(ConfigError, match="ScriptedProvider"):
        build_provider(resolve_model("scripted:demo"), api_key=None, base_url=None)


async def test_adapter_kinds_and_names() -> None:
    built = {
        mid: build_provider(resolve_model(mid), api_key="k", base_url=None)
        for mid in ("claude-sonnet-5", "gpt-5.4", "glm-4.7", "openrouter/openrouter/free")
    }
    local = build_provider(
        resolve_model("openai:llama3.1"), api_key="k", base_url="http://127.0.0.1:1/v1"
    )
    official = build_provider(resolve_model("openai:gpt-x"), api_key="k", base_url=None)
    try:
        assert isinstance(built["claude-sonnet-5"], AnthropicProvider)
        # OpenAI's own endpoint speaks the Responses API ...
        assert isinstance(built["gpt-5.4"], OpenAIResponsesProvider)
        assert isinstance(official, OpenAIResponsesProvider)
        # ... compatible endpoints keep Chat Completions
        assert all(
            isinstance(p, OpenAICompatProvider)
            for p in (built["glm-4.7"], built["openrouter/openrouter/free"], local)
        )
        assert [p.name for p in built.values()] == ["anthropic", "openai", "glm", "openrouter"]
    finally:
        for p in (*built.values(), local, official):
            await p.aclose()


async def test_local_openai_server_needs_no_key() -> None:
    async with FakeOpenAIServer() as srv:
        srv.enqueue_text("local answer")
        provider = build_provider(
            resolve_model("openai:llama3.1"), api_key=None, base_url=srv.base_url
        )
        response = await provider.complete(make_request(model="llama3.1"))
        await provider.aclose()
        sent = srv.generate_requests[0]
    assert response.message.text == "local answer"
    assert sent.headers["authorization"] == f"Bearer {LOCAL_SERVER_KEY}"
    assert sent.body["model"] == "llama3.1"
    assert "max_tokens" in sent.body


@pytest.mark.parametrize(
    ("model_id", "wire_model"),
    [
        ("glm-5.3", "glm-5.3"),
        ("openrouter/openrouter/auto", "openrouter/auto"),
    ],
)
async def test_compat_providers_send_the_api_model_name(model_id: str, wire_model: str) -> None:
    ref = resolve_model(model_id)
    async with FakeOpenAIServer() as srv:
        srv.enqueue_text("ok")
        provider = build_provider(ref, api_key="k-123", base_url=srv.base_url, timeout=5.0)
        await provider.complete(make_request(model=ref.model))
        await provider.aclose()
        sent = srv.generate_requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.body["model"] == wire_model
    assert sent.headers["authorization"] == "Bearer k-123"


async def test_openai_catalog_model_uses_the_responses_api() -> None:
    ref = resolve_model("gpt-6-sol")
    async with FakeResponsesServer() as srv:
        srv.enqueue_text("ok")
        provider = build_provider(ref, api_key="k-123", base_url=srv.base_url, timeout=5.0)
        await provider.complete(make_request(model=ref.model))
        await provider.aclose()
        sent = srv.generate_requests[0]
    assert sent.path == "/v1/responses"
    assert sent.body["model"] == "gpt-6-sol"
    assert sent.body["include"] == ["reasoning.encrypted_content"]
    assert sent.headers["authorization"] == "Bearer k-123"


async def test_openai_bypass_id_on_the_responses_api_asks_for_no_encrypted_reasoning() -> None:
    # a model outside the catalog may not reason; the API refuses `include` for those
    async with FakeResponsesServer() as srv:
        srv.enqueue_text("ok")
        provider = build_provider(resolve_model("openai:gpt-x"), api_key="k", base_url=None)
        assert isinstance(provider, OpenAIResponsesProvider)
        provider._client = provider._client.with_options(base_url=srv.base_url)
        await provider.complete(make_request(model="gpt-x"))
        await provider.aclose()
        sent = srv.generate_requests[0].body
    assert "include" not in sent and sent["store"] is False


@pytest.mark.parametrize("model_id", ["jev-1.13.0", "typesafe/jev-1.13"])
def test_judge_only_models_are_never_built_as_generators(model_id: str) -> None:
    with pytest.raises(ConfigError, match="judge-only"):
        build_provider(resolve_model(model_id), api_key="k", base_url=None)


def test_a_path_the_catalog_does_not_allow_is_refused_not_replaced() -> None:
    with pytest.raises(ConfigError, match=r"'gpt-5.5' is not served on path 'codex'; allowed: api"):
        build_provider(resolve_model("gpt-5.5"), api_key="k", base_url=None, path="codex")


async def test_anthropic_through_factory_against_fake() -> None:
    ref = resolve_model("claude-opus-5-5")
    async with FakeAnthropicServer() as srv:
        srv.enqueue_text("hi from claude")
        provider = build_provider(ref, api_key="k-1", base_url=srv.base_url)
        response = await provider.complete(make_request(model=ref.model))
        await provider.aclose()
        sent = srv.generate_requests[0]
    assert response.message.text == "hi from claude"
    assert sent.path == "/v1/messages"
    assert sent.body["model"] == "claude-opus-5-5"
