"""What every platform's renderer shares: the neutral :class:`Chunk`, the Markdown parser,
block packing and UTF-16 lengths.

A chunk is one message of a reply in the platform's own markup (``formatted``) with its
``fallback`` (plain text, or the same text where the platform's markup is its fallback),
sent instead when the platform rejects the markup. Each platform renders in its own
folder: ``bots.telegram.format`` (Telegram HTML), ``bots.slack`` (mrkdwn),
``bots.discord.format`` (Markdown kept as Markdown).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from markdown_it import MarkdownIt

__all__ = ["Chunk", "human_size", "markdown_parser", "pack_blocks", "utf16_len"]

#: CommonMark + tables + strikethrough, raw HTML off (every renderer parses with it)
markdown_parser = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])


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


def pack_blocks(
    blocks: Iterable[Chunk], *, limit: int, length: Callable[[str], int] = len
) -> list[Chunk]:
    """Pack rendered blocks (each already within ``limit``) into chunks, blank line between.

    A chunk's formatted text stays within ``limit`` units of ``length``; the plain twin is
    joined the same way, block for block (Telegram HTML, Slack mrkdwn).
    """
    chunks: list[Chunk] = []
    cur_f: list[str] = []
    cur_p: list[str] = []
    size = 0
    for b in blocks:
        n = length(b.formatted) + (2 if cur_f else 0)
        if cur_f and size + n > limit:
            chunks.append(Chunk(formatted="\n\n".join(cur_f), fallback="\n\n".join(cur_p)))
            cur_f, cur_p, size = [], [], 0
            n = length(b.formatted)
        cur_f.append(b.formatted)
        cur_p.append(b.fallback)
        size += n
    if cur_f:
        chunks.append(Chunk(formatted="\n\n".join(cur_f), fallback="\n\n".join(cur_p)))
    return chunks
