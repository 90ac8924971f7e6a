"""Streaming a platform file to disk with a byte limit (shared by the connectors).

Nothing beyond ``max_bytes`` is read: a declared ``Content-Length`` over it refuses before
the body, and a body that grows past it is cut off. URLs carry tokens on some platforms
(Telegram's file URL): they are never logged.

Where a file comes from is not the platform's payload's to say (issue #30, finding 10): a
download goes only to the platform's own file hosts or the origin of a configured base URL
(``allowed``, origins such as ``https://files.slack.com``), by :func:`check_url`; a redirect
is followed only to an allowed origin too, and a credential header never leaves the origin
it was meant for. Telegram's ``file_path`` stays beneath ``/file/bot<token>/``
(:func:`telegram_file_url`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import re
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urljoin, urlsplit

import aiohttp

from bots.port import AttachmentRefused, DeliveryError

__all__ = ["TOO_LARGE", "check_url", "origin", "stream_to_file", "telegram_file_url"]

TOO_LARGE = "it is larger than this channel's limit"
_CHUNK = 64 * 1024
#: redirects followed at most (each to an allowed origin)
_MAX_REDIRECTS = 3
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: what a Telegram ``file_path`` is made of (``documents/file_12.pdf``)
_TG_PATH = re.compile(r"[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*")
_REFUSED_ADDRESS = "its download address is not one of the platform's file hosts"


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (the default port written out); ``""`` when it has
    none (no http(s) scheme, no host, credentials in it, a malformed port)."""
    if any(ord(c) < 33 or c == "\\" for c in url):
        return ""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return ""
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or "@" in parts.netloc:
        return ""
    return f"{scheme}://{parts.hostname.lower()}:{port or _DEFAULT_PORTS[scheme]}"


def check_url(url: str, allowed: Sequence[str]) -> str:
    """``url`` when its origin is one of ``allowed`` (origins or base URLs: only their
    scheme, host and port count), else AttachmentRefused; the address is never echoed (it
    may carry a token)."""
    here = origin(url)
    if not here or here not in {origin(a) for a in allowed}:
        raise AttachmentRefused(_REFUSED_ADDRESS)
    return url


def telegram_file_url(base_file_url: str, file_path: str) -> str:
    """The URL of a ``getFile`` ``file_path`` beneath ``base_file_url`` (``…/file/bot<token>``).

    The path is the Bot API's to give but not to steer: ``..``, absolute paths, queries,
    percent-escapes and anything beyond plain path characters are refused, so the file
    fetched is always one beneath the bot's own file folder."""
    clean = posixpath.normpath(file_path) if file_path else ""
    if (not _TG_PATH.fullmatch(file_path) or clean != file_path
            or any(seg in (".", "..") for seg in file_path.split("/"))):
        raise AttachmentRefused("Telegram gave a file path outside the bot's files")
    return f"{base_file_url.rstrip('/')}/{file_path}"


def _create(dest: Path) -> BinaryIO:
    """``dest`` created anew: never written through a symlink or a hard link planted at its
    name (a link to GEODE's ``.env`` would be truncated by a plain ``open("wb")``)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(dest)  # a stale part of an interrupted download
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o666)
    return os.fdopen(fd, "wb")


async def _get(session: aiohttp.ClientSession, url: str, headers: dict[str, str],
               allowed: Sequence[str] | None) -> aiohttp.ClientResponse:
    """GET with redirects followed by hand: each hop checked against ``allowed``, and the
    headers (a bearer token) dropped once the origin changes."""
    first = origin(url)
    for _ in range(_MAX_REDIRECTS + 1):
        if allowed is not None:
            check_url(url, allowed)
        resp = await session.get(url, headers=headers if origin(url) == first else {},
                                 allow_redirects=False)
        if resp.status not in (301, 302, 303, 307, 308) or "Location" not in resp.headers:
            return resp
        url = urljoin(url, resp.headers["Location"])
        resp.release()
    raise DeliveryError("fatal", "file download redirected too many times")


async def stream_to_file(
    url: str, dest: Path, *, max_bytes: int, headers: dict[str, str] | None = None,
    timeout_s: float = 120.0, allowed: Sequence[str] | None = None,
) -> int:
    """GET ``url`` into ``dest``; returns the byte count. ``allowed``: the origins the
    download (and any redirect) may go to; the connectors always give it. Raises
    AttachmentRefused (over ``max_bytes``, or an address not allowed) or DeliveryError (HTTP
    error ``fatal``, network failure ``retry``)."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            resp = await _get(session, url, headers or {}, allowed)
            async with resp:
                if resp.status != 200:
                    raise DeliveryError("fatal", f"file download answered HTTP {resp.status}")
                if resp.content_length is not None and resp.content_length > max_bytes:
                    raise AttachmentRefused(TOO_LARGE)
                f = await asyncio.to_thread(_create, dest)
                size = 0
                try:
                    async for chunk in resp.content.iter_chunked(_CHUNK):
                        size += len(chunk)
                        if size > max_bytes:
                            raise AttachmentRefused(TOO_LARGE)
                        await asyncio.to_thread(f.write, chunk)
                finally:
                    await asyncio.to_thread(f.close)
                return size
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise DeliveryError("retry", f"file download failed: {type(exc).__name__}") from None
