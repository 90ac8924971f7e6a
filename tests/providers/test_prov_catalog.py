"""The model catalog against the seed page's list; exact ids, paths, roles, never an upgrade."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from geode.errors import ConfigError, UnknownModelError
from geode.providers.catalog import (
    ASSUMED_CONTEXT_WINDOW,
    ASSUMED_MAX_OUTPUT,
    BYPASS_CONTEXT_WINDOW,
    DEFAULT_MODEL,
    PROVIDERS,
    ModelRef,
    default_model_for,
    list_models,
    refused_paths,
    resolve_generation_model,
    resolve_model,
    role_model,
    select_path,
)

SEED = tomllib.loads((Path(__file__).parent / "data" / "seed_models.toml").read_text("utf-8"))


def _by_provider() -> dict[str, list[ModelRef]]:
    out: dict[str, list[ModelRef]] = {}
    for ref in list_models():
        key = "typesafe_jev" if ref.judge_only else ref.provider
        out.setdefault(key, []).append(ref)
    return out


def test_seed_data_names_its_section() -> None:
    assert SEED["section"] == "支持的模型 · 按提供商"


def test_catalog_holds_exactly_the_seed_ids_in_seed_order() -> None:
    got = {k: [r.id for r in v] for k, v in _by_provider().items()}
    assert got == {
        "anthropic": SEED["anthropic"]["ids"],
        "openai": SEED["openai"]["ids"],
        "glm": SEED["glm"]["ids"],
        "openrouter": SEED["openrouter"]["selectors"],
        "typesafe_jev": [SEED["typesafe_jev"]["direct"], SEED["typesafe_jev"]["via_openrouter"]],
    }
    assert len(SEED["anthropic"]["ids"]) == 12
    assert len(SEED["openai"]["ids"]) == 11
    assert len(SEED["glm"]["ids"]) == 9


def test_catalog_access_paths_match_the_seed() -> None:
    paths = {r.id: r.paths for r in list_models()}
    for pid in ("anthropic", "glm"):
        assert {paths[i] for i in SEED[pid]["ids"]} == {("api",)}
    for mid in SEED["openai"]["codex_subscription"]:
        assert paths[mid] == ("api", "codex_subscription"), mid
    for mid in SEED["openai"]["api_only"]:
        assert paths[mid] == ("api",), mid
    assert sorted(SEED["openai"]["codex_subscription"] + SEED["openai"]["api_only"]) == sorted(
        SEED["openai"]["ids"]
    )


def test_catalog_roles_defaults_labels_and_refusals_match_the_seed() -> None:
    for pid in ("anthropic", "openai", "glm", "openrouter"):
        refs = _by_provider()[pid]
        roles = {role: r.id for r in refs for role in r.roles}
        assert roles == SEED[pid]["roles"], pid
        defaults = [r.id for r in refs if r.default]
        assert defaults == ([SEED[pid]["default"]] if SEED[pid]["default"] else []), pid
        labels = {r.id: r.label for r in refs if r.label}
        assert labels == SEED[pid]["labels"], pid
        assert sorted(refused_paths(pid)) == sorted(SEED[pid]["refused"]), pid
    kinds = {r.id: r.kind for r in list_models()}
    assert {kinds[i] for i in SEED["openrouter"]["selectors"]} == {"selector"}
    assert kinds[SEED["typesafe_jev"]["direct"]] == "judge"
    assert kinds[SEED["typesafe_jev"]["via_openrouter"]] == "judge"
    assert resolve_model("typesafe/jev-1.13").provider == "openrouter"
    assert resolve_model("jev-1.13.0").provider == "typesafe"


def test_limits_are_known_facts_or_marked_unknown() -> None:
    known = {r.id: (r.context_window, r.max_output) for r in list_models() if r.context_known}
    assert known == {
        "claude-haiku-4-5-20251001": (200_000, 64_000),
        "claude-opus-4-5": (200_000, 64_000),
        "claude-sonnet-4-5-20250929": (200_000, 64_000),
        "glm-4.7": (200_000, 128_000),
    }
    assert {r.id for r in list_models() if r.output_known} == set(known)
    unknown = resolve_model("gpt-6-sol")
    assert not unknown.context_known and not unknown.output_known
    assert (unknown.context_window, unknown.max_output) == (
        ASSUMED_CONTEXT_WINDOW,
        ASSUMED_MAX_OUTPUT,
    )


def test_roles_come_from_the_catalog_and_config_overrides_them() -> None:
    assert role_model("auxiliary", "anthropic").id == "claude-sonnet-5"
    assert role_model("low_cost", "anthropic").id == "claude-haiku-4-5-20251001"
    assert role_model("primary", "anthropic").id == "claude-opus-5-5"
    # a provider the seed gives only a default uses it for every role
    assert role_model("auxiliary", "openai").id == "gpt-6-sol"
    assert role_model("low_cost", "glm").id == "glm-5.3"
    assert role_model("auxiliary", "anthropic", {"auxiliary": "glm-5"}).id == "glm-5"
    with pytest.raises(ConfigError, match=r"\[model.roles\] auxiliary"):
        role_model("auxiliary", "openrouter")
    with pytest.raises(ConfigError, match="judge-only"):
        role_model("auxiliary", "anthropic", {"auxiliary": "jev-1.13.0"})


@pytest.mark.parametrize(
    ("model_id", "path", "expected"),
    [
        ("gpt-6-sol", None, "api"),
        ("gpt-6-sol", "api", "api"),
        ("gpt-6-sol", "codex", "codex_subscription"),
        ("gpt-5.6-luna", "codex_subscription", "codex_subscription"),
        ("claude-opus-5-5", "api", "api"),
    ],
)
def test_allowed_paths_are_selected(model_id: str, path: str | None, expected: str) -> None:
    assert select_path(resolve_model(model_id), path) == expected


@pytest.mark.parametrize("model_id", ["gpt-5.5", "gpt-5.4-nano", "claude-opus-5-5", "glm-5.3"])
def test_a_path_the_model_does_not_allow_is_refused_naming_the_allowed_ones(
    model_id: str,
) -> None:
    with pytest.raises(ConfigError) as info:
        select_path(resolve_model(model_id), "codex")
    assert f"{model_id!r} is not served on path 'codex'; allowed: api." in str(info.value)
    assert "gpt-6-sol" in str(info.value)  # where the codex path is available


def test_unknown_path_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Unknown access path 'oauth'"):
        select_path(resolve_model("gpt-6-sol"), "oauth")


@pytest.mark.parametrize("model_id", ["jev-1.13.0", "typesafe/jev-1.13", "typesafe:jev-2"])
def test_judge_only_ids_are_refused_as_generation_models(model_id: str) -> None:
    with pytest.raises(ConfigError, match="judge-only"):
        resolve_generation_model(model_id)


@pytest.mark.parametrize(
    ("model_id", "provider", "api_model", "default"),
    [
        ("claude-opus-5-5", "anthropic", "claude-opus-5-5", True),
        ("claude-haiku-4-5-20251001", "anthropic", "claude-haiku-4-5-20251001", False),
        ("gpt-6-sol", "openai", "gpt-6-sol", True),
        ("gpt-5.3-codex", "openai", "gpt-5.3-codex", False),
        ("glm-5.3", "glm", "glm-5.3", True),
        ("glm-4.7-flash", "glm", "glm-4.7-flash", False),
        ("openrouter/openrouter/auto", "openrouter", "openrouter/auto", False),
        ("openrouter/openrouter/free", "openrouter", "openrouter/free", False),
    ],
)
def test_resolve_catalog_ids(model_id: str, provider: str, api_model: str, default: bool) -> None:
    ref = resolve_model(model_id)
    assert (ref.provider, ref.model, ref.default) == (provider, api_model, default)
    assert ref.id == model_id
    assert ref.in_catalog
    assert ref.max_output > 0 and ref.context_window > 0


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
        resolve_model("claude-opus-5-6")
    assert info.value.model_id == "claude-opus-5-6"
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
        "claude-opus-5-6",  # no "nearest of family"
        "claude-opus-4",
        "CLAUDE-OPUS-5-5",  # no case folding
        " claude-opus-5-5",  # no trimming
        "claude-haiku-4-5",  # no dated-snapshot aliasing
        "gpt-5.6-latest",
        "gpt-6",
        "glm-5.0",
        "glm-4.7-flash-x",
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
        "typesafe": ("judge", "TYPESAFE_API_KEY", "TYPESAFE_BASE_URL"),
        "scripted": ("scripted", None, None),
    }
    assert PROVIDERS["glm"].default_base_url == "https://api.z.ai/api/paas/v4/"
    assert PROVIDERS["openrouter"].default_base_url == "https://openrouter.ai/api/v1"
