"""Build the adapter for a resolved model.

The settings module reads the environment (``ProviderInfo.key_env`` / ``base_url_env``) and
the config file, then calls :func:`build_provider`; nothing here reads ``os.environ``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geode.errors import ConfigError
from geode.providers.base import BaseProvider
from geode.providers.catalog import PROVIDERS, ModelRef

if TYPE_CHECKING:
    from geode.providers._clients import ClientCache

__all__ = ["LOCAL_SERVER_KEY", "build_provider"]

#: key sent to a local ``openai:`` server that needs none (the SDK refuses an empty key)
LOCAL_SERVER_KEY = "not-needed"


def build_provider(
    ref: ModelRef,
    *,
    api_key: str | None,
    base_url: str | None,
    timeout: float = 120.0,
    clients: ClientCache | None = None,
) -> BaseProvider:
    """The adapter that serves ``ref``.

    Args:
        ref: from :func:`geode.providers.catalog.resolve_model`.
        api_key: the provider's key, or None when not configured.
        base_url: endpoint override, or None for the provider's default.
        timeout: seconds per network read/write.
        clients: the process's shared SDK clients; the adapter uses the one for its
            endpoint and credential (built on first use). None: the adapter owns a client.

    Raises:
        ConfigError: the key is required and missing (the message names the variable), or
            the provider cannot be built from configuration (``scripted``).
    """
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
    # Imported here: each SDK takes about a second to import, and a process only needs one.
    if info.kind == "anthropic":
        from geode.providers.anthropic import AnthropicProvider

        return AnthropicProvider(
            api_key=key, base_url=url, timeout=timeout, provider_name=info.name,
            client=clients.anthropic(api_key=key, base_url=url, timeout=timeout)
            if clients is not None else None,
        )
    from geode.providers.openai_compat import OpenAICompatProvider

    return OpenAICompatProvider(
        provider_name=info.name, api_key=key, base_url=url, timeout=timeout,
        client=clients.openai(api_key=key, base_url=url, timeout=timeout)
        if clients is not None else None,
    )
