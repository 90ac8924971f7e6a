"""The neutral :class:`Chunk` every platform's renderer gives, and UTF-16 lengths.

A chunk is one message of a reply in the platform's own markup (``formatted``) with its
``fallback`` (plain text, or the same text where the platform's markup is its fallback),
sent instead when the platform rejects the markup. The renderer is shared
(:mod:`bots.render`); each platform's dialect is in its own folder:
``bots.telegram.format`` (Telegram HTML), ``bots.slack`` (mrkdwn), ``bots.discord.format``
(Markdown kept as Markdown).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Chunk", "human_size", "utf16_len"]


def utf16_len(text: str) -> int:
    """Length as Telegram and Discord count it (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


def human_size(n: int) -> str:
    """A byte count as people read it (``12 KB``, ``3.5 MB``; binary units)."""
    for unit, shift in (("GB", 30), ("MB", 20), ("KB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class Chunk:
    """One message of a reply: ``formatted`` in the platform's markup, ``fallback`` sent
    instead when the platform rejects that markup."""

    formatted: str
    fallback: str
