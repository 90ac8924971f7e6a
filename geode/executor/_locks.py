"""Check 8 — resource locks: calls touching the same resource key run one at a time.

One :class:`ResourceLocks` is shared by every session of a process, so two threads writing
the same file serialise too. Keys are acquired in sorted order (no lock-order deadlock), and
an entry is dropped when nobody holds or waits for it, so the map does not grow without bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

__all__ = ["ResourceLocks"]


@dataclass
class _Entry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    refs: int = 0


class ResourceLocks:
    """Per-key asyncio locks with reference-counted cleanup."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        """Keys currently held or waited for."""
        return len(self._entries)

    @asynccontextmanager
    async def hold(self, keys: Iterable[str]) -> AsyncIterator[None]:
        """Hold every key in ``keys`` for the body of the ``async with``."""
        ordered = sorted(set(keys))
        # Reference every entry before the first await, so none is dropped while we wait.
        entries = [self._ref(k) for k in ordered]
        acquired: list[_Entry] = []
        try:
            for entry in entries:
                await entry.lock.acquire()
                acquired.append(entry)
            yield
        finally:
            for entry in reversed(acquired):
                entry.lock.release()
            for key in ordered:
                self._unref(key)

    def _ref(self, key: str) -> _Entry:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
        entry.refs += 1
        return entry

    def _unref(self, key: str) -> None:
        entry = self._entries[key]
        entry.refs -= 1
        if entry.refs == 0:
            del self._entries[key]
