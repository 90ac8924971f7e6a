"""Streaming a platform file to disk with a byte limit (shared by the connectors).

Nothing beyond ``max_bytes`` is read: a declared ``Content-Length`` over it refuses before
the body, and a body that grows past it is cut off. URLs carry tokens on some platforms
(Telegram's file URL): they are never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import BinaryIO

import aiohttp

from bots.port import AttachmentRefused, DeliveryError

__all__ = ["TOO_LARGE", "stream_to_file"]

TOO_LARGE = "it is larger than this channel's limit"
_CHUNK = 64 * 1024


def _create(dest: Path) -> BinaryIO:
    """``dest`` created anew: never written through a symlink or a hard link planted at its
    name (a link to GEODE's ``.env`` would be truncated by a plain ``open("wb")``)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(dest)  # a stale part of an interrupted download
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o666)
    return os.fdopen(fd, "wb")


async def stream_to_file(
    url: str, dest: Path, *, max_bytes: int, headers: dict[str, str] | None = None,
    timeout_s: float = 120.0,
) -> int:
    """GET ``url`` into ``dest``; returns the byte count. Raises AttachmentRefused (over
    ``max_bytes``) or DeliveryError (HTTP error ``fatal``, network failure ``retry``)."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, \
                session.get(url, headers=headers or {}) as resp:
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
