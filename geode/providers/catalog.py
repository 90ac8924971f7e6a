"""The model catalog (data in ``catalog.toml``) and the provider table.

A catalog id selects its provider. ``provider:model`` bypasses the catalog for local or new
models behind a compatible endpoint. Ids are matched exactly: an unknown id is an error with
close matches, never silently replaced by a "newer" model.
"""

from __future__ import annotations

import difflib
import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

from geode.errors import ConfigError, UnknownModelError

__all__ = [
    "BYPASS_CONTEXT_WINDOW",
    "BYPASS_MAX_OUTPUT",
    "DEFAULT_MODEL",
    "PROVIDERS",
    "ModelRef",
    "ProviderInfo",
    "ProviderKind",
    "default_model_for",
    "list_models",
    "resolve_model",
]

DEFAULT_MODEL = "claude-opus-5-5"
#: limits assumed for a ``provider:model`` id, which the catalog knows nothing about
BYPASS_CONTEXT_WINDOW = 128_000
BYPASS_MAX_OUTPUT = 8_192

ProviderKind = Literal["anthropic", "openai", "scripted"]


@dataclass(frozen=True, kw_only=True)
class ProviderInfo:
    """How to reach one provider: adapter kind, credential and endpoint variables.

    The ``*_env`` fields name variables; the settings module reads them, never an adapter.
    """

    name: str
    kind: ProviderKind
    key_env: str | None
    base_url_env: str | None
    default_base_url: str | None


PROVIDERS: dict[str, ProviderInfo] = {
    "anthropic": ProviderInfo(
        name="anthropic",
        kind="anthropic",
        key_env="ANTHROPIC_API_KEY",
        base_url_env="ANTHROPIC_BASE_URL",
        default_base_url="https://api.anthropic.com",
    ),
    "openai": ProviderInfo(
        name="openai",
        kind="openai",
        key_env="OPENAI_API_KEY",
        base_url_env="OPENAI_BASE_URL",
        default_base_url="https://api.openai.com/v1",
    ),
    "glm": ProviderInfo(
        name="glm",
        kind="openai",
        key_env="ZAI_API_KEY",
        base_url_env="ZAI_BASE_URL",
        default_base_url="https://api.z.ai/api/paas/v4/",
    ),
    "openrouter": ProviderInfo(
        name="openrouter",
        kind="openai",
        key_env="OPENROUTER_API_KEY",
        base_url_env="OPENROUTER_BASE_URL",
        default_base_url="https://openrouter.ai/api/v1",
    ),
    "scripted": ProviderInfo(
        name="scripted", kind="scripted", key_env=None, base_url_env=None, default_base_url=None
    ),
}


@dataclass(frozen=True)
class ModelRef:
    """A resolved model: which provider serves it and under which API model name.

    Attributes:
        provider: key of :data:`PROVIDERS`.
        model: the name sent to the API (``openrouter/auto`` for ``openrouter/openrouter/auto``).
        context_window: tokens the model accepts.
        max_output: output tokens per call.
        default: the provider's default model.
        id: what the user typed (catalog id or ``provider:model``); defaults to ``model``.
    """

    provider: str
    model: str
    context_window: int
    max_output: int
    default: bool = False
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            object.__setattr__(self, "id", self.model)

    @property
    def info(self) -> ProviderInfo:
        return PROVIDERS[self.provider]

    @property
    def in_catalog(self) -> bool:
        return ":" not in self.id


@functools.cache
def _catalog() -> dict[str, ModelRef]:
    text = resources.files("geode.providers").joinpath("catalog.toml").read_text("utf-8")
    data: dict[str, Any] = tomllib.loads(text)
    refs: dict[str, ModelRef] = {}
    for row in data.get("models", []):
        model_id = str(row["id"])
        provider = str(row["provider"])
        # A broken packaged catalog is a bug in GEODE, not the user's config: fail loudly.
        if provider not in PROVIDERS:
            raise RuntimeError(f"catalog.toml: {model_id!r} names unknown provider {provider!r}")
        if model_id in refs:
            raise RuntimeError(f"catalog.toml: duplicate id {model_id!r}")
        refs[model_id] = ModelRef(
            provider=provider,
            model=str(row.get("api_model", model_id)),
            context_window=int(row["context_window"]),
            max_output=int(row["max_output"]),
            default=bool(row.get("default", False)),
            id=model_id,
        )
    return refs


def list_models() -> list[ModelRef]:
    """Every catalog entry, in catalog order."""
    return list(_catalog().values())


def default_model_for(provider: str) -> ModelRef | None:
    """The provider's default catalog model, if it has one."""
    return next((r for r in _catalog().values() if r.provider == provider and r.default), None)


def resolve_model(model_id: str) -> ModelRef:
    """Resolve a catalog id or a ``provider:model`` id.

    Raises:
        UnknownModelError: the id is neither in the catalog nor a known ``provider:`` prefix;
            ``close`` holds the nearest catalog ids.
        ConfigError: ``provider:`` with an empty model name.
    """
    catalog = _catalog()
    ref = catalog.get(model_id)
    if ref is not None:
        return ref
    if ":" in model_id:
        provider, _, model = model_id.partition(":")
        if provider in PROVIDERS:
            if not model.strip():
                raise ConfigError(
                    f"Model id {model_id!r} names no model after {provider + ':'!r}; "
                    f"write e.g. {provider}:MODEL_NAME."
                )
            return ModelRef(
                provider=provider,
                model=model,
                context_window=BYPASS_CONTEXT_WINDOW,
                max_output=BYPASS_MAX_OUTPUT,
                default=False,
                id=model_id,
            )
        close = [f"{p}:{model}" for p in difflib.get_close_matches(provider, list(PROVIDERS), n=2)]
        raise UnknownModelError(model_id, close)
    raise UnknownModelError(model_id, difflib.get_close_matches(model_id, list(catalog), n=3))
