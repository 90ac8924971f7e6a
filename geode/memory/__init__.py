"""Memory: what the bot remembers about the person it answers (*user* memory, keyed by
platform and user id, shown in that person's threads on every binding that enables it) and
for everyone in a channel binding (*channel* memory).

Entries are durable rows (:mod:`geode.store.memory`); a session's view of them
(:class:`SessionMemory`) puts them into the system prompt within a token budget
(:func:`render_memory`: whole entries only, the least recently used left out first, and the
prompt says how many) and writes them for the ``memory`` tool. Who an entry is about is
always the host's knowledge of who sent the message the turn answers
(:class:`MemoryScope`), never the model's arguments: one user's words cannot reach another
user's memory.
"""

from __future__ import annotations

from geode.memory._render import MAX_ENTRY_CHARS, RenderedMemory, clean_text, render_memory
from geode.memory._scope import MEMORY_MODES, MemoryMode, MemoryScope
from geode.memory._session import (
    MAX_ENTRIES_PER_OWNER,
    MemoryRead,
    MemoryWriteError,
    SessionMemory,
)

__all__ = [
    "MAX_ENTRIES_PER_OWNER",
    "MAX_ENTRY_CHARS",
    "MEMORY_MODES",
    "MemoryMode",
    "MemoryRead",
    "MemoryScope",
    "MemoryWriteError",
    "RenderedMemory",
    "SessionMemory",
    "clean_text",
    "render_memory",
]
