"""Whose memory a session sees and writes: given by the host, never by the model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["MEMORY_MODES", "MemoryMode", "MemoryScope"]

#: a binding's ``memory``: "off"; "user" (each person's own memory); "channel" (theirs and
#: the binding's shared memory)
MemoryMode = Literal["off", "user", "channel"]
MEMORY_MODES: tuple[MemoryMode, ...] = ("off", "user", "channel")


@dataclass(frozen=True, kw_only=True)
class MemoryScope:
    """The memory of one turn.

    Attributes:
        mode: the binding's ``memory``.
        user: ``platform:user_id`` of the person whose message the turn answers (the owner
            of the user memory it sees and writes); "" when nobody is known: no user memory.
        channel: the binding's key (``platform:channel``), owner of its channel memory.
    """

    mode: MemoryMode
    user: str = ""
    channel: str = ""

    @property
    def user_enabled(self) -> bool:
        return self.mode in ("user", "channel") and bool(self.user)

    @property
    def channel_enabled(self) -> bool:
        return self.mode == "channel" and bool(self.channel)
