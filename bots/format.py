"""The neutral :class:`Chunk` every platform's renderer gives, and sizes as people read them.

A chunk is one message of a reply in the platform's own markup (``formatted``) with its
``fallback`` (plain text, or the same text where the platform's markup is its fallback),
sent instead when the platform rejects the markup. The renderer is shared (:mod:`bots.render`,
which also counts UTF-16 lengths); each platform's dialect is in its own folder:
``bots.telegram.format`` (Telegram HTML), ``bots.slack._mrkdwn`` (mrkdwn),
``bots.discord.format`` (Markdown kept as Markdown). This module imports no parser: the port
and the stores use :class:`Chunk` without loading the renderer.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Chunk", "human_size"]


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
