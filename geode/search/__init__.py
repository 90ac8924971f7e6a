"""Web search backends (``[search] provider``) and the client the ``web_search`` tool uses.

A backend is a :class:`SearchBackendSpec` (how a query becomes a request, how the answer
becomes rows) registered by name (:mod:`geode.search._registry`); :func:`search_client`
builds the configured one with its key from the secrets (never from a config file).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geode.errors import ConfigError
from geode.search._client import SearchError, WebSearchClient
from geode.search._registry import GROUP, backend_names, load_backend
from geode.search._spec import (
    FRESHNESS,
    Freshness,
    SearchBackendSpec,
    SearchHit,
    SearchQuery,
    SearchRequest,
)

if TYPE_CHECKING:
    from geode.settings import SearchSettings, Secrets

__all__ = [
    "FRESHNESS",
    "GROUP",
    "Freshness",
    "SearchBackendSpec",
    "SearchError",
    "SearchHit",
    "SearchQuery",
    "SearchRequest",
    "WebSearchClient",
    "backend_names",
    "load_backend",
    "search_client",
]


def search_client(search: SearchSettings, secrets: Secrets) -> WebSearchClient | None:
    """The configured backend's client, or None when ``[search] provider`` is not set.

    A missing key is not an error here (the tool says so when it is called, and ``geode
    doctor`` reports it): a process that never searches must still start.

    Raises:
        ConfigError: the provider is not registered, or needs a ``base_url`` it lacks.
    """
    if not search.provider:
        return None
    spec = load_backend(search.provider)
    if spec is None:  # the settings check the name; a backend uninstalled since is caught here
        raise ConfigError(f"[search] provider {search.provider!r} is not installed; "
                          f"known: {', '.join(backend_names())}")
    base_url = search.base_url or spec.default_base_url
    if not base_url:
        raise ConfigError(f"[search] provider {spec.name!r} needs base_url (the address of "
                          "your instance, e.g. \"http://127.0.0.1:8888/\")")
    key = secrets.get(spec.key_env) if spec.key_env else None
    return WebSearchClient(spec=spec, base_url=base_url, key=key, timeout_s=search.timeout_s,
                           max_results=search.max_results)
