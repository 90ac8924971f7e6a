"""The model catalog: exact ids, provider:model bypass, close matches, never an upgrade."""

from __future__ import annotations

import pytest

from geode.errors import ConfigError, UnknownModelError
from geode.providers.catalog import (
    BYPASS_CONTEXT_WINDOW,
    DEFAULT_MODEL,
    PROVIDERS,
    ModelRef,
    default_model_for,
    list_models,
    resolve_model,
)

EXPECTED_IDS = {
    "anthropic": [
        "claude-opus-5-5",
        "claude-sonnet-5",
        "claude-haiku-4-5-20251001",
        "claude-opus-4-8",
        "claude-sonnet-4-6",
        "claude-opus-4-1",
    ],
    "openai": [
        "gpt-6-sol",
        "gpt-6-astra",
        "gpt-6-luna",
        "gpt-5.6-pro",
        "gpt-5.6",
        "gpt-5.6-mini",
        "gpt-5.5",
        "gpt-5.4",
        "gpt-5.4-mini",
        "gpt-5.3-codex",
    ],
    "glm": ["glm-5.3", "glm-5.3-flash", "glm-5.2", "glm-4.6"],
    "openrouter": ["openrouter/openrouter/auto", "openrouter/openrouter/free"],
}


def test_catalog_holds_exactly_the_listed_ids_in_order() -> None:
    by_provider: dict[str, list[str]] = {}
    for ref in list_models():
        by_provider.setdefault(ref.provider, []).append(ref.id)
    assert by_provider == EXPECTED_IDS


@pytest.mark.parametrize(
    ("model_id", "provider", "api_model", "window", "default"),
    [
        ("claude-opus-5-5", "anthropic", "claude-opus-5-5", 200_000, True),
        ("claude-haiku-4-5-20251001", "anthropic", "claude-haiku-4-5-20251001", 200_000, False),
        ("gpt-6-sol", "openai", "gpt-6-sol", 400_000, True),
        ("gpt-5.3-codex", "openai", "gpt-5.3-codex", 400_000, False),
        ("glm-5.3", "glm", "glm-5.3", 200_000, True),
        ("glm-4.6", "glm", "glm-4.6", 200_000, False),
        ("openrouter/openrouter/auto", "openrouter", "openrouter/auto", 2_000_000, True),
        ("openrouter/openrouter/free", "openrouter", "openrouter/free", 128_000, False),
    ],
)
def test_resolve_catalog_ids(
    model_id: str, provider: str, api_model: str, window: int, default: bool
) -> None:
    ref = resolve_model(model_id)
    assert (ref.provider, ref.model, ref.context_window, ref.default) == (
        provider,
        api_model,
        window,
        default,
    )
    assert ref.id == model_id
    assert ref.in_catalog
    assert ref.max_output > 0


def test_default_model_is_the_anthropic_primary() -> None:
    assert DEFAULT_MODEL == "claude-opus-5-5"
    assert resolve_model(DEFAULT_MODEL).default
    assert default_model_for("anthropic") == resolve_model(DEFAULT_MODEL)
    defaults = [r.id for r in list_models() if r.default]
    # at most one default per provider
    assert len({resolve_model(d).provider for d in defaults}) == len(defaults)


@pytest.mark.parametrize(
    ("model_id", "provider", "api_model"),
    [
        ("openai:llama3.1", "openai", "llama3.1"),
        ("anthropic:claude-x", "anthropic", "claude-x"),
        ("glm:glm-9-preview", "glm", "glm-9-preview"),
        ("openrouter:meta-llama/llama-4:free", "openrouter", "meta-llama/llama-4:free"),
        # a catalog name behind a prefix is a bypass too: no catalog limits are borrowed
        ("openai:gpt-6-sol", "openai", "gpt-6-sol"),
    ],
)
def test_provider_prefix_bypasses_catalog(model_id: str, provider: str, api_model: str) -> None:
    ref = resolve_model(model_id)
    assert ref == ModelRef(
        provider=provider,
        model=api_model,
        context_window=BYPASS_CONTEXT_WINDOW,
        max_output=ref.max_output,
        default=False,
        id=model_id,
    )
    assert ref.context_window == 128_000
    assert not ref.in_catalog


def test_unknown_id_gives_close_matches() -> None:
    with pytest.raises(UnknownModelError) as info:
        resolve_model("claude-opus-5")
    assert info.value.model_id == "claude-opus-5"
    assert "claude-opus-5-5" in info.value.close
    assert "claude-opus-5-5" in str(info.value)

    with pytest.raises(UnknownModelError) as info:
        resolve_model("gpt6-sol")
    assert info.value.close[0] == "gpt-6-sol"


def test_unknown_id_with_nothing_close_has_empty_matches() -> None:
    with pytest.raises(UnknownModelError) as info:
        resolve_model("zzzzzzzzzz")
    assert info.value.close == []
    assert isinstance(info.value, ConfigError)


def test_unknown_provider_prefix_suggests_known_provider() -> None:
    with pytest.raises(UnknownModelError) as info:
        resolve_model("opnai:llama3.1")
    assert info.value.close == ["openai:llama3.1"]


def test_empty_model_after_prefix_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="names no model"):
        resolve_model("openai:")


@pytest.mark.parametrize(
    "near_miss",
    [
        "claude-opus-5",  # no "latest of family"
        "claude-opus-4",
        "CLAUDE-OPUS-5-5",  # no case folding
        " claude-opus-5-5",  # no trimming
        "claude-haiku-4-5",  # no dated-snapshot aliasing
        "gpt-5.6-latest",
        "gpt-6",
        "glm-5",
        "openrouter/auto",  # the API name is not a catalog id
    ],
)
def test_no_id_is_upgraded_or_aliased(near_miss: str) -> None:
    with pytest.raises(UnknownModelError):
        resolve_model(near_miss)


def test_every_catalog_id_resolves_to_itself() -> None:
    for ref in list_models():
        resolved = resolve_model(ref.id)
        assert resolved is ref or resolved == ref
        expected_api = (
            ref.id.removeprefix("openrouter/") if ref.provider == "openrouter" else ref.id
        )
        assert resolved.model == expected_api


def test_provider_table() -> None:
    assert {n: (p.kind, p.key_env, p.base_url_env) for n, p in PROVIDERS.items()} == {
        "anthropic": ("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
        "openai": ("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
        "glm": ("openai", "ZAI_API_KEY", "ZAI_BASE_URL"),
        "openrouter": ("openai", "OPENROUTER_API_KEY", "OPENROUTER_BASE_URL"),
        "scripted": ("scripted", None, None),
    }
    assert PROVIDERS["glm"].default_base_url == "https://api.z.ai/api/paas/v4/"
    assert PROVIDERS["openrouter"].default_base_url == "https://openrouter.ai/api/v1"
