"""One vendor SDK client per endpoint for the life of the process.

An ``AsyncOpenAI`` / ``AsyncAnthropic`` client owns an httpx connection pool and an SSL
context: building one costs ~20 ms of CPU, and a client per session would also open a new
TCP (and TLS) connection for every turn and leave the old pool unclosed. The runtime keeps
one :class:`ClientCache`; adapters built through it share the client for their endpoint,
keyed by (SDK, base URL, credential, timeout). A different credential for the same endpoint
(a rotated key in ``.env``, a reloaded config) gets a new client; the superseded one may
still carry a running request, so it is closed with the others when the cache closes.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Literal

import structlog

if TYPE_CHECKING:
    import aiohttp
    import anthropic
    import openai

__all__ = ["ClientCache", "ClientKind"]

log = structlog.get_logger(__name__)

ClientKind = Literal["openai", "anthropic"]
#: the lean session's connection limit: the openai/anthropic SDKs' default max_connections
_MAX_CONNECTIONS = 1000
_Key = tuple[ClientKind, str, str, float]


def _fingerprint(credential: str) -> str:
    # The cache key never holds the credential itself (a key dump or a repr cannot show it).
    return hashlib.sha256(credential.encode()).hexdigest()


class ClientCache:
    """SDK clients shared by every adapter of a process; :meth:`aclose` at shutdown.

    Each client is built with ``max_retries=0`` (retries are the loop's explicit policy,
    :mod:`geode.providers.retry`) and a transport timeout of ``timeout`` seconds per
    read/write, connect capped at 10 s.
    """

    def __init__(self) -> None:
        self._clients: dict[_Key, Any] = {}
        self._retired: list[Any] = []
        self._closed = False
        self._http: aiohttp.ClientSession | None = None
        self._proxies: dict[str, tuple[str | None, aiohttp.BasicAuth | None]] = {}

    def __len__(self) -> int:
        return len(self._clients)

    def openai(self, *, api_key: str, base_url: str | None, timeout: float) -> openai.AsyncOpenAI:
        """The shared Chat Completions client for ``base_url`` with ``api_key``."""
        client: openai.AsyncOpenAI = self._get("openai", api_key, base_url, timeout)
        return client

    def anthropic(
        self, *, api_key: str, base_url: str | None, timeout: float
    ) -> anthropic.AsyncAnthropic:
        """The shared Messages API client for ``base_url`` with ``api_key``."""
        client: anthropic.AsyncAnthropic = self._get("anthropic", api_key, base_url, timeout)
        return client

    def http(self) -> aiohttp.ClientSession:
        """The shared aiohttp session of the lean Chat Completions path
        (:class:`~geode.providers.openai_compat.OpenAICompatProvider`): one connection pool
        for every endpoint (per host). Built on first use, on the running loop."""
        if self._closed:
            raise RuntimeError("the provider client cache is closed (the runtime shut down)")
        if self._http is None or self._http.closed:
            import aiohttp

            # Not trust_env: that reads the environment's proxies and ~/.netrc on every
            # request; the proxy of an endpoint is looked up once (proxy_for). As many
            # connections as the SDKs' clients allow (aiohttp's default is 100: calls past
            # it would queue, e.g. a thousand threads waiting on a slow model).
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=_MAX_CONNECTIONS))
        return self._http

    def proxy_for(self, url: str) -> tuple[str | None, aiohttp.BasicAuth | None]:
        """The proxy the environment names for ``url`` (``HTTPS_PROXY``, ``NO_PROXY``, ...,
        as the SDKs' httpx clients read them when built), looked up once per URL."""
        found = self._proxies.get(url)
        if found is None:
            from aiohttp.helpers import get_env_proxy_for_url
            from yarl import URL

            try:
                proxy, auth = get_env_proxy_for_url(URL(url))
                found = (str(proxy), auth)
            except LookupError:
                found = (None, None)
            self._proxies[url] = found
        return found

    def _get(self, kind: ClientKind, api_key: str, base_url: str | None, timeout: float) -> Any:
        if self._closed:
            raise RuntimeError("the provider client cache is closed (the runtime shut down)")
        url = base_url or ""
        key: _Key = (kind, url, _fingerprint(api_key), timeout)
        client = self._clients.get(key)
        if client is not None:
            return client
        for old_key in [k for k in self._clients if k[:2] == (kind, url) and k != key]:
            # Same endpoint, another credential or timeout: new requests use the new client,
            # one still running finishes on the old one, closed at shutdown.
            self._retired.append(self._clients.pop(old_key))
        client = _build(kind, api_key=api_key, base_url=base_url, timeout=timeout)
        self._clients[key] = client
        log.debug("provider.client_built", sdk=kind, base_url=url or "default")
        return client

    async def aclose(self) -> None:
        """Close every client (their connection pools); the cache refuses new requests."""
        self._closed = True
        clients = [*self._clients.values(), *self._retired]
        self._clients.clear()
        self._retired.clear()
        http, self._http = self._http, None
        if http is not None:
            await http.close()
        for client in clients:
            try:
                await client.close()
            except Exception:
                log.warning("provider.client_close_failed", exc_info=True)


def _build(kind: ClientKind, *, api_key: str, base_url: str | None, timeout: float) -> Any:
    # Imported here: each SDK takes a large share of a second to import; a process needs one.
    if kind == "anthropic":
        import anthropic

        return anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            timeout=anthropic.Timeout(timeout, connect=min(10.0, timeout)),
            max_retries=0,
        )
    import openai

    return openai.AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        timeout=openai.Timeout(timeout, connect=min(10.0, timeout)),
        max_retries=0,
    )
