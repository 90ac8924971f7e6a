"""Small asyncio helpers of the channel layer."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

__all__ = ["reap"]

log = structlog.get_logger(__name__)


async def reap(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` and wait for it, retrieving whatever it ended with (never raises)."""
    if task is None:
        return
    task.cancel()
    await asyncio.wait({task})
    if not task.cancelled():
        exc = task.exception()
        if exc is not None and not isinstance(exc, asyncio.CancelledError):
            log.debug("task.ended_with", task=task.get_name(), error=repr(exc))
