"""Model Markdown for Discord, which renders Markdown itself: split by lines with code
fences balanced per chunk; the formatted text is its own fallback."""

from __future__ import annotations

import re
from collections.abc import Callable

import discord

from bots.format import Chunk, utf16_len

__all__ = ["DISCORD_LIMIT", "chunk_fenced_markdown", "render_progress"]

DISCORD_LIMIT = 2000

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def _fence_step(line: str, marker: str | None) -> tuple[str | None, str | None]:
    """(marker open after ``line``, opening line to repeat) given the marker open before it."""
    m = _FENCE.match(line)
    if m is None:
        return marker, None
    run, info = m.group(1), m.group(2)
    if marker is None:
        if run[0] == "`" and "`" in info:
            return None, None  # not a fence (CommonMark: no backtick in a backtick info string)
        return run, line.strip()
    # A closing fence: same character, at least as long, nothing after it.
    if run[0] == marker[0] and len(run) >= len(marker) and not info.strip():
        return None, None
    return marker, None


def _split_line(line: str, room: int, length: Callable[[str], int], prose: bool) -> list[str]:
    if length(line) <= room:
        return [line]
    pieces: list[str] = []
    while length(line) > room:
        cut = room
        while cut > 1 and length(line[:cut]) > room:
            cut -= 1
        if prose:  # prefer a space in the second half
            space = line.rfind(" ", 0, cut)
            cut = space + 1 if space > cut // 2 else cut
        pieces.append(line[:cut])
        line = line[cut:]
    return [*pieces, line] if line else pieces


def chunk_fenced_markdown(
    markdown: str, *, limit: int = DISCORD_LIMIT, length: Callable[[str], int] = utf16_len
) -> list[Chunk]:
    """Split Markdown for a platform that renders Markdown itself (Discord).

    Whole lines are packed up to ``limit``; a chunk that ends inside a code fence is closed
    with the fence's marker and the next chunk reopens it with the same opening line (the
    language tag kept), so every chunk renders on its own. A line longer than a chunk is
    cut. Both fields of each :class:`Chunk` hold the same Markdown text.

    Invariant: every chunk has an even number of fence lines (balanced) and at most
    ``limit`` units of ``length``.
    """
    text = markdown.strip("\n")
    if not text.strip():
        text = "(empty answer)"
    out: list[str] = []
    cur: list[str] = []
    size = 0
    marker: str | None = None  # fence open at the end of ``cur``
    opener = ""

    def add(line: str) -> None:
        nonlocal size
        size += length(line) + (1 if cur else 0)
        cur.append(line)

    def flush() -> None:
        nonlocal cur, size
        if marker is not None:
            cur.append(marker)
        out.append("\n".join(cur))
        cur, size = [], 0
        if marker is not None:
            add(opener)

    for raw in text.split("\n"):
        after, opened = _fence_step(raw, marker)
        inside = marker is not None and after is not None
        reserve = length(marker) + 1 if marker is not None else 0
        room = limit - reserve - (length(opener) + 1 if marker is not None else 0)
        if after is not None and marker is None:  # an opening fence line: keep it whole
            room = limit
        for piece in _split_line(raw, max(1, room), length, prose=not inside):
            closing = (length(after) + 1) if after is not None else 0
            need = length(piece) + (1 if cur else 0)
            if cur and size + need + closing > limit:
                flush()
            add(piece)
        if opened is not None:
            opener = opened
        marker = after
    if cur and any(line.strip() for line in cur):
        if marker is not None:
            cur.append(marker)
        out.append("\n".join(cur))
    return [Chunk(formatted=c, fallback=c) for c in out if c.strip()]


def render_progress(text: str) -> Chunk:
    """A progress message's plain lines, with Markdown characters escaped (a tool name
    such as ``__init__`` must not turn bold), and the raw text as the fallback."""
    return Chunk(formatted=discord.utils.escape_markdown(text), fallback=text)
