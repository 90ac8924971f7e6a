"""The lean HTTP path the adapters share: one POST of the wire JSON on the runtime's shared
aiohttp session (:meth:`~geode.providers._clients.ClientCache.http`), a streamed answer read
as server-sent events, each event's data handed on as the string it is.

A vendor SDK builds a pydantic model for every streamed event (~0.8 ms of CPU each: ~320 ms
for an answer of 400 tokens); an adapter reading the events here makes one ``json.loads``
of each. What an adapter keeps of the SDK: its client's headers and credential, its
timeouts, and the classification of every failure (:mod:`geode.providers._errors`), so the
retry policy sees the same :class:`~geode.errors.ModelError` either way.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from geode.errors import ModelError

if TYPE_CHECKING:
    import aiohttp

    from geode.providers._clients import ClientCache

__all__ = [
    "MAX_EVENT_BYTES",
    "HTTPStatus",
    "LeanEndpoint",
    "malformed_error",
    "sse_events",
    "transport_error",
]

#: what a read of the stream raises for a broken event (its JSON, its shape)
MALFORMED = (ValueError, AttributeError, TypeError, KeyError, IndexError)

#: the most one server-sent event (a line without its newline, or an event's data lines
#: without the blank line that ends it) may hold: past it the stream is malformed, read no
#: further (an endpoint streaming one endless line would otherwise grow our memory without
#: bound). The APIs' events are a few hundred bytes; a server tool's result a few hundred kB.
MAX_EVENT_BYTES = 16 << 20

#: the redirect statuses a lean call follows, and how many in a row (httpx's default)
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 20


class HTTPStatus(Exception):
    """The cause a lean call's status error is raised from (the status it answered)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


@dataclass(frozen=True, kw_only=True)
class LeanEndpoint:
    """One endpoint's POST on the runtime's shared aiohttp session, with the SDK client's
    headers (and credential) and its timeouts: ``timeout`` per read, connect capped at 10 s.
    The environment's proxy for the URL is looked up once (:meth:`ClientCache.proxy_for`)."""

    url: str
    headers: Mapping[str, str]
    #: the shared session (built on first use, on the running loop)
    session: Callable[[], aiohttp.ClientSession]
    timeout: aiohttp.ClientTimeout
    proxy: str | None
    proxy_auth: aiohttp.BasicAuth | None

    @classmethod
    def of(cls, cache: ClientCache, *, url: str, headers: Mapping[str, Any],
           timeout: float) -> LeanEndpoint:
        import aiohttp

        proxy, auth = cache.proxy_for(url)
        return cls(url=url, session=cache.http,
                   headers={k: v for k, v in headers.items() if isinstance(v, str)},
                   timeout=aiohttp.ClientTimeout(total=None, sock_connect=min(10.0, timeout),
                                                 sock_read=timeout),
                   proxy=proxy, proxy_auth=auth)

    @contextlib.asynccontextmanager
    async def post(self, body: bytes) -> AsyncIterator[aiohttp.ClientResponse]:
        """``async with endpoint.post(body) as resp``: the POST of ``body`` (wire JSON).

        A redirect is followed as the SDKs' httpx clients follow it (at most
        :data:`MAX_REDIRECTS`; 301/302/303 as a GET without the body, 307/308 as the same
        POST), except that a redirect to another origin (scheme, host or port) leaves every
        credential header behind: aiohttp drops only ``Authorization`` there, and httpx too,
        so Anthropic's ``x-api-key`` went to whatever host the ``Location`` named."""
        from yarl import URL

        url, method = URL(self.url), "POST"
        data: bytes | None = body
        headers = dict(self.headers)
        proxy, proxy_auth = self.proxy, self.proxy_auth
        for _ in range(MAX_REDIRECTS + 1):
            async with self.session().request(
                    method, url, data=data, headers=headers, timeout=self.timeout,
                    proxy=proxy, proxy_auth=proxy_auth, allow_redirects=False) as resp:
                location = resp.headers.get("Location")
                if resp.status not in _REDIRECTS or not location:
                    yield resp
                    return
                target = url.join(URL(location))
                if target.origin() != url.origin():
                    headers = _without_credentials(headers)
                    proxy, proxy_auth = _env_proxy(target)
                if resp.status in (301, 302, 303):
                    method, data = "GET", None
                    headers = {k: v for k, v in headers.items()
                               if k.lower() not in ("content-type", "content-length")}
                url = target
        raise ValueError(f"more than {MAX_REDIRECTS} redirects from {self.url}")


def _without_credentials(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` without any that may carry a credential: named like one (``x-api-key``,
    ``Authorization``, ``api-key``, a cookie) or holding a registered secret."""
    from geode.secret_redaction import registered_secrets

    secrets = registered_secrets()
    return {k: v for k, v in headers.items()
            if not _CREDENTIAL_HEADER.search(k) and not any(s in v for s in secrets)}


_CREDENTIAL_HEADER = re.compile(r"(?i)(key|auth|token|secret|cookie|password|signature)")


def _env_proxy(url: Any) -> tuple[str | None, aiohttp.BasicAuth | None]:
    from aiohttp.helpers import get_env_proxy_for_url

    try:
        proxy, auth = get_env_proxy_for_url(url)
    except LookupError:
        return None, None
    return str(proxy), auth


def transport_error(provider: str, exc: BaseException) -> ModelError:
    """A lean call's timeout or connection failure, as the SDK path classifies it: transient."""
    if isinstance(exc, TimeoutError):
        return ModelError(f"{provider}: request timed out", kind="transient", provider=provider)
    return ModelError(
        _masked(f"{provider}: connection failed or dropped ({type(exc).__name__}: {exc})"),
        kind="transient", provider=provider)


def malformed_error(provider: str, exc: BaseException) -> ModelError:
    """A body or event that is not what the API sends (broken JSON, a wrong shape): the
    answer was cut or garbled on the way, transient as the SDK path classifies it."""
    return ModelError(
        _masked(f"{provider}: malformed or interrupted response ({type(exc).__name__}: {exc})"),
        kind="transient", provider=provider)


def _masked(text: str, limit: int = 300) -> str:
    """``text`` masked, then cut to ``limit`` characters: cut first, a secret the cut fell
    inside would no longer match its mask and its first characters would show."""
    from geode.secret_redaction import redact_text

    return redact_text(text)[:limit]


async def sse_events(content: aiohttp.StreamReader) -> AsyncIterator[tuple[str, str]]:
    """``(event name, data)`` of each server-sent event of ``content``: the name ``""`` when
    the event has none, the data's lines joined as the SSE format says; comments, ``id`` /
    ``retry`` fields and events without data are skipped.

    Read as the bytes arrive (one read per network packet, its events split here) rather
    than line by line: aiohttp's ``readline`` costs a buffer search and a wake-up per line,
    two or three lines per token of a streamed answer."""
    lines: list[str] = []
    size = 0  # of the event's data lines so far
    name = ""
    rest = b""
    async for piece in content.iter_any():
        buf = rest + piece if rest else piece
        *complete, rest = buf.split(b"\n")
        if len(rest) > MAX_EVENT_BYTES:
            raise ValueError(f"a server-sent event line outgrew {MAX_EVENT_BYTES} bytes")
        for raw in complete:
            line = raw.decode("utf-8")
            if line.endswith("\r"):
                line = line[:-1]
            if not line:
                if lines:
                    yield name, "\n".join(lines)
                    lines = []
                    size = 0
                name = ""
            elif line.startswith("data:"):
                value = line[5:]
                lines.append(value[1:] if value.startswith(" ") else value)
                size += len(raw)
                if size > MAX_EVENT_BYTES:
                    raise ValueError(f"a server-sent event outgrew {MAX_EVENT_BYTES} bytes")
            elif line.startswith("event:"):
                value = line[6:]
                name = value[1:] if value.startswith(" ") else value
    if rest.startswith(b"data:"):  # a last line without its newline
        value = rest[5:].decode("utf-8").rstrip("\r")
        lines.append(value[1:] if value.startswith(" ") else value)
    if lines:
        yield name, "\n".join(lines)
