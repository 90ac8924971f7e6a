"""The model catalog (data in ``catalog.toml``), the provider table and the access paths.

A catalog id selects its provider. ``provider:model`` bypasses the catalog for local or new
models behind a compatible endpoint. Ids are matched exactly: an unknown id is an error with
close matches, never silently replaced by a "newer" model.

The catalog is data: per model its access paths (``api``, ``codex_subscription``), its seed
roles (``primary``, ``auxiliary``, ``low_cost``) and its kind (a generation model, a routing
selector, or a judge-only model). Choosing a path the catalog does not allow for a model is
a :class:`ConfigError` naming the allowed ones; nothing falls back to another path.
"""

from __future__ import annotations

import difflib
import functools
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

from geode.errors import ConfigError, UnknownModelError

__all__ = [
    "ACCESS_PATHS",
    "ASSUMED_CONTEXT_WINDOW",
    "ASSUMED_MAX_OUTPUT",
    "BYPASS_CONTEXT_WINDOW",
    "BYPASS_MAX_OUTPUT",
    "DEFAULT_MODEL",
    "PROVIDERS",
    "ROLES",
    "AccessPath",
    "ModelRef",
    "ProviderInfo",
    "ProviderKind",
    "Role",
    "default_model_for",
    "list_models",
    "model_has_vision",
    "normalize_path",
    "path_credential",
    "refused_paths",
    "resolve_generation_model",
    "resolve_model",
    "role_model",
    "select_path",
]

DEFAULT_MODEL = "claude-opus-5-5"
#: limits assumed for a ``provider:model`` id, which the catalog knows nothing about
BYPASS_CONTEXT_WINDOW = 128_000
BYPASS_MAX_OUTPUT = 8_192
#: limits assumed for a catalog model whose limits are not a known published fact
#: (the original GEODE assumes 200k for an unknown context window)
ASSUMED_CONTEXT_WINDOW = 200_000
ASSUMED_MAX_OUTPUT = 8_192

ProviderKind = Literal["anthropic", "openai", "scripted", "judge"]
AccessPath = Literal["api", "codex_subscription"]
ACCESS_PATHS: tuple[AccessPath, ...] = ("api", "codex_subscription")
#: what users may type for a path (``--path codex``, ``[model] path = "codex"``)
_PATH_NAMES: dict[str, AccessPath] = {
    "api": "api",
    "codex": "codex_subscription",
    "codex_subscription": "codex_subscription",
}
Role = Literal["primary", "auxiliary", "low_cost"]
ROLES: tuple[Role, ...] = ("primary", "auxiliary", "low_cost")
ModelKind = Literal["model", "selector", "judge"]

#: the credential each path needs, for messages and `geode models` (api: the provider's key)
CODEX_LOGIN_CREDENTIAL = "Codex CLI login (`codex login`)"


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
    # TypeSafe serves only the judge-only Jev model (SystemOne decision API).
    "typesafe": ProviderInfo(
        name="typesafe",
        kind="judge",
        key_env="TYPESAFE_API_KEY",
        base_url_env="TYPESAFE_BASE_URL",
        default_base_url="https://api.typesafe.ai/v1",
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
        context_window: tokens the model accepts (assumed when ``context_known`` is False).
        max_output: output tokens per call (assumed when ``output_known`` is False).
        default: the provider's default model.
        id: what the user typed (catalog id or ``provider:model``); defaults to ``model``.
        paths: access paths that may serve it.
        roles: the seed roles it fills (``primary``, ``auxiliary``, ``low_cost``).
        kind: ``model``, ``selector`` (a routing choice) or ``judge`` (judge only).
        label: the seed's display name, or "".
        context_known / output_known: the limit is a known fact, not an assumption.
        vision: the model takes images as input.
    """

    provider: str
    model: str
    context_window: int
    max_output: int
    default: bool = False
    id: str = ""
    paths: tuple[AccessPath, ...] = ("api",)
    roles: tuple[Role, ...] = ()
    kind: ModelKind = "model"
    label: str = ""
    context_known: bool = False
    output_known: bool = False
    #: takes image content (catalog ``vision = true``); unknown models are taken as not
    vision: bool = False

    def __post_init__(self) -> None:
        if not self.id:
            object.__setattr__(self, "id", self.model)

    @property
    def info(self) -> ProviderInfo:
        return PROVIDERS[self.provider]

    @property
    def in_catalog(self) -> bool:
        return ":" not in self.id

    @property
    def judge_only(self) -> bool:
        return self.kind == "judge"


@functools.cache
def _data() -> dict[str, Any]:
    text = resources.files("geode.providers").joinpath("catalog.toml").read_text("utf-8")
    return tomllib.loads(text)


def _tuple(row: Mapping[str, Any], key: str, allowed: tuple[str, ...], model_id: str) -> Any:
    values = tuple(str(v) for v in row.get(key, ()))
    bad = [v for v in values if v not in allowed]
    if bad:
        raise RuntimeError(f"catalog.toml: {model_id!r} has unknown {key} {bad}")
    return values


@functools.cache
def _catalog() -> dict[str, ModelRef]:
    refs: dict[str, ModelRef] = {}
    roles_seen: set[tuple[str, str]] = set()
    for row in _data().get("models", []):
        model_id = str(row["id"])
        provider = str(row["provider"])
        # A broken packaged catalog is a bug in GEODE, not the user's config: fail loudly.
        if provider not in PROVIDERS:
            raise RuntimeError(f"catalog.toml: {model_id!r} names unknown provider {provider!r}")
        if model_id in refs:
            raise RuntimeError(f"catalog.toml: duplicate id {model_id!r}")
        paths = _tuple(row, "paths", ACCESS_PATHS, model_id)
        if not paths:
            raise RuntimeError(f"catalog.toml: {model_id!r} has no access path")
        roles = _tuple(row, "roles", ROLES, model_id)
        for role in roles:
            if (provider, role) in roles_seen:
                raise RuntimeError(f"catalog.toml: two {provider} models have role {role!r}")
            roles_seen.add((provider, role))
        kind = str(row.get("kind", "model"))
        if kind not in ("model", "selector", "judge"):
            raise RuntimeError(f"catalog.toml: {model_id!r} has unknown kind {kind!r}")
        window, output = row.get("context_window"), row.get("max_output")
        refs[model_id] = ModelRef(
            provider=provider,
            model=str(row.get("api_model", model_id)),
            context_window=int(window) if window is not None else ASSUMED_CONTEXT_WINDOW,
            max_output=int(output) if output is not None else ASSUMED_MAX_OUTPUT,
            default=bool(row.get("default", False)),
            id=model_id,
            paths=paths,
            roles=roles,
            kind=kind,  # type: ignore[arg-type]  # checked just above
            label=str(row.get("label", "")),
            context_known=window is not None,
            output_known=output is not None,
            vision=bool(row.get("vision", False)),
        )
    return refs


def model_has_vision(model_id: str) -> bool:
    """True when the catalog says ``model_id`` takes images (False for unknown ids and
    ``provider:model`` ids: nothing says they do)."""
    ref = _catalog().get(model_id)
    return ref is not None and ref.vision


def list_models() -> list[ModelRef]:
    """Every catalog entry, in catalog order."""
    return list(_catalog().values())


def default_model_for(provider: str) -> ModelRef | None:
    """The provider's default catalog model, if it has one."""
    return next((r for r in _catalog().values() if r.provider == provider and r.default), None)


def refused_paths(provider: str) -> dict[str, str]:
    """Access paths the seed says GEODE refuses for ``provider``, with the reason."""
    refused: dict[str, Any] = _data().get("refused", {}).get(provider, {})
    return {str(k): str(v) for k, v in refused.items()}


def normalize_path(path: str) -> AccessPath:
    """``api`` / ``codex`` / ``codex_subscription`` → the catalog's path name.

    Raises:
        ConfigError: an unknown path name (the message lists the known ones).
    """
    known = _PATH_NAMES.get(path.strip().lower())
    if known is None:
        raise ConfigError(
            f"Unknown access path {path!r}; known: api, codex (the Codex-subscription path)."
        )
    return known


def select_path(ref: ModelRef, path: str | None) -> AccessPath:
    """The access path for ``ref``: ``path`` if the catalog allows it, else a ConfigError.

    ``None`` means the model's first path (``api`` for every catalog model). There is no
    fallback: a model asked for on a path it does not allow is refused, naming the allowed
    ones.
    """
    if path is None:
        return ref.paths[0]
    chosen = normalize_path(path)
    if chosen not in ref.paths:
        allowed = ", ".join("codex" if p == "codex_subscription" else p for p in ref.paths)
        codex_ok = [r.id for r in _catalog().values() if "codex_subscription" in r.paths]
        hint = (
            f" Models on the Codex-subscription path: {', '.join(codex_ok)}."
            if chosen == "codex_subscription"
            else ""
        )
        raise ConfigError(
            f"Model {ref.id!r} is not served on path {path!r}; allowed: {allowed}.{hint}"
        )
    return chosen


def path_credential(ref: ModelRef, path: str) -> str:
    """What a path needs for ``ref``, in words (an env var name or the Codex login)."""
    if path == "codex_subscription":
        return CODEX_LOGIN_CREDENTIAL
    return ref.info.key_env or "-"


def role_model(role: Role, provider: str, overrides: Mapping[str, str] | None = None) -> ModelRef:
    """The model GEODE uses for ``role`` next to a main model of ``provider``.

    Order: ``overrides[role]`` (config ``[model.roles]``), the catalog model holding the role
    for that provider, then the provider's default model (the seed gives OpenAI and GLM one
    default each and no separate roles). Judge-only ids never fill a role.

    Raises:
        ConfigError: the override is unknown or judge-only, or the provider has neither a role
            model nor a default (say ``[model.roles] ROLE = "ID"``).
    """
    if role not in ROLES:
        raise ConfigError(f"Unknown model role {role!r}; known: {', '.join(ROLES)}.")
    override = (overrides or {}).get(role)
    if override:
        return resolve_generation_model(override)
    refs = [r for r in _catalog().values() if r.provider == provider]
    found = next((r for r in refs if role in r.roles), None) or next(
        (r for r in refs if r.default and not r.judge_only), None
    )
    if found is None:
        raise ConfigError(
            f"No {role} model is known for provider {provider!r}: set "
            f'[model.roles] {role} = "MODEL_ID" in config.toml.'
        )
    return found


def resolve_generation_model(model_id: str) -> ModelRef:
    """:func:`resolve_model`, refusing judge-only ids (they never generate an answer)."""
    ref = resolve_model(model_id)
    if ref.judge_only:
        raise ConfigError(
            f"Model {ref.id!r} is judge-only (TypeSafe/Jev): it never generates answers. "
            'Use it as the verify judge with [verify] judge = "jev"; pick a generation model '
            "from `geode models`."
        )
    return ref


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
                kind="judge" if PROVIDERS[provider].kind == "judge" else "model",
            )
        close = [f"{p}:{model}" for p in difflib.get_close_matches(provider, list(PROVIDERS), n=2)]
        raise UnknownModelError(model_id, close)
    raise UnknownModelError(model_id, difflib.get_close_matches(model_id, list(catalog), n=3))
