"""The shared splitter: rendered blocks into chunks within a platform's limit.

Whole blocks are packed into chunks, a blank line between them (:func:`pack_blocks`). A
block longer than a chunk is cut first (:func:`split_block`): a code block between its lines
into several closed code blocks (an enormous line by characters), never leaving a fence or
a tag open; prose between lines, else between characters, never inside an entity
(``&amp;``). A platform that renders Markdown itself splits the source by lines instead
(:func:`split_markdown_source`), each chunk closing the code fence it ends in and the next
reopening it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from bots.format import Chunk, utf16_len
from bots.render._dialect import Dialect, Rendered

__all__ = ["pack_blocks", "split_block", "split_markdown_source"]


def pack_blocks(
    blocks: Iterable[Chunk], *, limit: int, length: Callable[[str], int] = len
) -> list[Chunk]:
    """Pack rendered blocks (each already within ``limit``) into chunks, blank line between.

    A chunk's formatted text stays within ``limit`` units of ``length``; the plain twin is
    joined the same way, block for block.
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


def split_block(block: Rendered, dialect: Dialect, limit: int) -> list[Rendered]:
    """``block`` as pieces each within ``limit`` (itself when it fits)."""
    if dialect.length(block.formatted) <= limit:
        return [block]
    if block.code is not None:
        return _split_code(block.code, block.lang, dialect, limit)
    return _split_prose(block, dialect, limit)


def _split_code(code: str, lang: str, d: Dialect, limit: int) -> list[Rendered]:
    # room for the block's own markup (fences, tags, the language), whatever the language
    budget = max(limit - d.length(d.code("", lang).formatted), 1)
    pieces: list[Rendered] = []
    lines: list[str] = []
    size = 0  # length of ``lines`` escaped and joined by newlines

    def flush() -> None:
        nonlocal lines, size
        pieces.append(d.code("\n".join(lines), lang))
        lines, size = [], 0

    for line in code.split("\n"):
        while d.length(d.escape(line)) > budget:  # one enormous line: cut it by characters
            cut = budget // d.escape_growth or 1
            if lines:
                flush()
            pieces.append(d.code(line[:cut], lang))
            line = line[cut:]
        n = d.length(d.escape(line))
        if lines and size + 1 + n > budget:
            flush()
        size = size + 1 + n if lines else n
        lines.append(line)
    if lines:
        flush()
    return pieces


def _split_prose(block: Rendered, d: Dialect, limit: int) -> list[Rendered]:
    if d.cut_formatted:  # markup that holds per line: cut it, never inside an entity
        text, step = block.formatted, limit
    else:  # markup that cannot be cut: this block's formatting is dropped, text escaped
        text, step = block.plain, limit // d.escape_growth or 1
    out: list[Rendered] = []
    while text:
        cut = text.rfind("\n", 0, step)
        cut = cut if cut > step // 2 else step
        if d.cut_formatted:
            amp = text.rfind("&", max(0, cut - 5), cut)
            if amp != -1 and ";" not in text[amp:cut]:
                cut = amp or cut
        part, text = text[:cut], text[cut:].lstrip("\n")
        out.append(Rendered(part, part) if d.cut_formatted else Rendered(d.escape(part), part))
    return out


# -- Markdown kept as Markdown ---------------------------------------------------------------

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


def split_markdown_source(
    markdown: str, *, limit: int, length: Callable[[str], int] = utf16_len
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
