"""Build the adapter for a resolved model.

The settings module reads the environment (``ProviderInfo.key_env`` / ``base_url_env``) and
the config file, then calls :func:`build_provider`; nothing here reads ``os.environ``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geode.errors import ConfigError
from geode.providers.base import BaseProvider
from geode.providers.catalog import PROVIDERS, AccessPath, ModelRef, select_path

if TYPE_CHECKING:
    from geode.providers._clients import ClientCache
    from geode.providers.codex_auth import CodexLogin

__all__ = ["LOCAL_SERVER_KEY", "build_provider", "check_provider", "uses_responses_api"]

#: key sent to a local ``openai:`` server that needs none (the SDK refuses an empty key)
LOCAL_SERVER_KEY = "not-needed"
#: SDK key of the Codex path's client; the login's bearer token goes with each request
CODEX_PLACEHOLDER_KEY = "codex-login"


def uses_responses_api(ref: ModelRef, base_url: str | None) -> bool:
    """OpenAI's own models speak the Responses API; an ``openai:`` id pointed at another
    endpoint (vLLM, Ollama, a proxy) keeps Chat Completions, as GLM and OpenRouter do."""
    if ref.provider != "openai":
        return False
    return ref.in_catalog or base_url is None or "api.openai.com" in base_url


def build_provider(
    ref: ModelRef,
    *,
    api_key: str | None,
    base_url: str | None,
    timeout: float = 120.0,
    clients: ClientCache | None = None,
    path: str | None = None,
    codex_login: CodexLogin | None = None,
) -> BaseProvider:
    """The adapter that serves ``ref`` on access ``path``.

    Args:
        ref: from :func:`geode.providers.catalog.resolve_model`.
        api_key: the provider's key, or None when not configured.
        base_url: endpoint override, or None for the provider's default (on the Codex path:
            the subscription endpoint).
        timeout: seconds per network read/write.
        clients: the process's shared SDK clients; the adapter uses the one for its
            endpoint and credential (built on first use). None: the adapter owns a client.
        path: ``api`` (default) or ``codex`` / ``codex_subscription``; checked against the
            catalog, never replaced by another path.
        codex_login: the Codex CLI login, needed on the Codex path.

    Raises:
        ConfigError: the key is required and missing (the message names the variable), the
            model is judge-only, the path is not allowed for the model, the Codex login is
            missing, or the provider cannot be built from configuration (``scripted``).
    """
    chosen, key, url = _validated(ref, api_key=api_key, base_url=base_url, path=path,
                                  codex_login=codex_login)
    if chosen == "codex_subscription":
        from geode.providers.openai_responses import OpenAIResponsesProvider

        # The bearer token is sent per request (it is refreshed), so the endpoint's shared
        # client carries only a placeholder key.
        return OpenAIResponsesProvider(
            provider_name="codex",
            api_key=None,
            base_url=base_url,
            timeout=timeout,
            codex=codex_login,
            client=clients.openai(api_key=CODEX_PLACEHOLDER_KEY, base_url=base_url,
                                  timeout=timeout)
            if clients is not None else None,
        )
    info = PROVIDERS[ref.provider]
    # Imported here: each SDK takes about a second to import, and a process only needs one.
    if info.kind == "anthropic":
        from geode.providers.anthropic import AnthropicProvider

        return AnthropicProvider(
            api_key=key, base_url=url, timeout=timeout, provider_name=info.name,
            client=clients.anthropic(api_key=key, base_url=url, timeout=timeout)
            if clients is not None else None,
            http=clients,
        )
    if uses_responses_api(ref, base_url):
        from geode.providers.openai_responses import OpenAIResponsesProvider

        return OpenAIResponsesProvider(
            provider_name=info.name, api_key=key, base_url=url, timeout=timeout,
            client=clients.openai(api_key=key, base_url=url, timeout=timeout)
            if clients is not None else None,
            encrypted_reasoning=ref.in_catalog,
        )
    from geode.providers.openai_compat import OpenAICompatProvider

    return OpenAICompatProvider(
        provider_name=info.name, api_key=key, base_url=url, timeout=timeout,
        client=clients.openai(api_key=key, base_url=url, timeout=timeout)
        if clients is not None else None,
        http=clients,
    )


def check_provider(
    ref: ModelRef,
    *,
    api_key: str | None,
    base_url: str | None,
    path: str | None = None,
    codex_login: CodexLogin | None = None,
) -> None:
    """Raise the ConfigError :func:`build_provider` would raise for these arguments, without
    building the adapter: no SDK import, no client (``geode serve``'s start-up check of its
    default model; the SDK is loaded by the first turn that needs it)."""
    _validated(ref, api_key=api_key, base_url=base_url, path=path, codex_login=codex_login)


def _validated(
    ref: ModelRef,
    *,
    api_key: str | None,
    base_url: str | None,
    path: str | None,
    codex_login: CodexLogin | None,
) -> tuple[AccessPath, str, str | None]:
    """The checks of :func:`build_provider`: (access path, key, URL) or a ConfigError. The key
    is empty on the Codex path (the login's bearer token goes with each request)."""
    if ref.judge_only:
        raise ConfigError(
            f"Model {ref.id!r} is judge-only (TypeSafe/Jev): it never generates answers. "
            'Use it as the verify judge with [verify] judge = "jev".'
        )
    chosen = select_path(ref, path)
    if chosen == "codex_subscription":
        if codex_login is None:
            raise ConfigError(f"Model {ref.id!r} on the Codex path needs the Codex CLI login.")
        if not codex_login.auth_file.is_file():
            raise ConfigError(
                f"Model {ref.id!r} on the Codex path: no Codex login at "
                f"{codex_login.auth_file}. Run `codex login` (the official Codex CLI) first."
            )
        return chosen, "", base_url
    info = PROVIDERS.get(ref.provider)
    if info is None:
        raise ConfigError(
            f"Model {ref.id!r} names unknown provider {ref.provider!r}; "
            f"known: {', '.join(sorted(PROVIDERS))}."
        )
    if info.kind == "scripted":
        raise ConfigError(
            f"Model {ref.id!r}: the scripted provider replays a script given in code "
            "(geode.providers.scripted.ScriptedProvider); it cannot be built from configuration."
        )
    url = base_url or info.default_base_url
    key = api_key or None
    if key is None:
        # An ``openai:`` id pointed at a custom endpoint is a local server (Ollama, vLLM,
        # llama.cpp): those take no key, but the SDK insists on a non-empty string.
        if ref.provider == "openai" and base_url and not ref.in_catalog:
            key = LOCAL_SERVER_KEY
        else:
            local = ref.provider == "openai" and not ref.in_catalog
            hint = (
                f" (or set {info.base_url_env} to a local server that needs none)" if local else ""
            )
            raise ConfigError(
                f"Model {ref.id!r} needs an API key for {info.name}: set {info.key_env} in the "
                f"environment or in $GEODE_HOME/.env{hint}."
            )
    return chosen, key, url
