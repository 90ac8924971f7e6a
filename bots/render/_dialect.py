"""A dialect: how one platform writes the neutral blocks, and the walk that asks it.

A dialect says how to write inline styles and escapes, how each kind of block looks, and
the size rules (its limit, how it counts length, how much escaping can grow a character).
Everything else is shared: the walk over the blocks (:func:`render`), list layout, and the
splitter (:mod:`bots.render._split`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from bots.format import Chunk
from bots.render._blocks import (
    Block,
    CodeBlock,
    Heading,
    Inline,
    ListBlock,
    Paragraph,
    Quote,
    Raw,
    Rule,
    Table,
    plain_text,
)

__all__ = ["Dialect", "Rendered", "grid", "render"]


@dataclass(frozen=True)
class Rendered:
    """One block in a dialect: its markup and its plain-text twin."""

    formatted: str
    plain: str
    #: the raw code of a code block (or a table's grid), so the splitter can cut it
    #: between lines into several closed blocks
    code: str | None = None
    lang: str = ""


class Dialect(ABC):
    """How a platform writes blocks (subclass per platform; see ``bots/<platform>/``)."""

    #: the platform's message limit, in units of :meth:`length`
    limit: ClassVar[int]
    #: a list's indentation per level, and a list item's continuation lines' indent
    list_indent: ClassVar[str] = "  "
    list_hang: ClassVar[str] = "  "
    #: the most :meth:`escape` may grow one character (bounds a cut of an enormous line)
    escape_growth: ClassVar[int] = 5
    #: an oversized paragraph is cut in its markup (True: markup that holds per line, e.g.
    #: mrkdwn; never inside an entity) or as its plain text escaped again (False: markup
    #: that cannot be cut, e.g. HTML tags spanning lines; its formatting is dropped)
    cut_formatted: ClassVar[bool] = False

    def length(self, text: str) -> int:
        """A text's length as the platform counts it against :attr:`limit`."""
        return len(text)

    @abstractmethod
    def escape(self, text: str) -> str:
        """Literal text (code, plain pieces) made safe in this markup."""

    @abstractmethod
    def inline(self, spans: tuple[Inline, ...]) -> str:
        """Inline spans in this markup."""

    def inline_plain(self, spans: tuple[Inline, ...]) -> str:
        """Inline spans as the plain-text fallback."""
        return plain_text(spans)

    def paragraph(self, spans: tuple[Inline, ...]) -> Rendered:
        return Rendered(self.inline(spans), self.inline_plain(spans))

    @abstractmethod
    def heading(self, spans: tuple[Inline, ...]) -> Rendered: ...

    @abstractmethod
    def code(self, code: str, lang: str) -> Rendered:
        """A closed code block (the splitter also wraps each piece of a long one)."""

    @abstractmethod
    def quote(self, inner: list[Rendered]) -> Rendered: ...

    def rule(self) -> Rendered:
        return Rendered("———", "———")

    @abstractmethod
    def table(self, grid: str) -> Rendered:
        """A table, given as its monospaced grid (:func:`grid`)."""

    def raw(self, text: str) -> Rendered:
        return Rendered(self.escape(text), text)

    @abstractmethod
    def empty(self, text: str, limit: int) -> Chunk:
        """The one chunk of an answer with no block (``text``: the answer, or a
        placeholder)."""


def grid(rows: tuple[tuple[str, ...], ...]) -> str:
    """Table rows as a left-aligned grid, two spaces between columns."""
    width = max(map(len, rows)) if rows else 0
    widths = [max((len(r[i]) for r in rows if i < len(r)), default=0) for i in range(width)]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    return "\n".join(lines)


def render(blocks: tuple[Block, ...], dialect: Dialect, depth: int = 0) -> list[Rendered]:
    """Each block in the dialect (one :class:`Rendered` per block); ``depth``: list
    nesting."""
    out: list[Rendered] = []
    for block in blocks:
        match block:
            case Paragraph(inlines):
                out.append(dialect.paragraph(inlines))
            case Heading(inlines=inlines):
                out.append(dialect.heading(inlines))
            case CodeBlock(code, lang):
                out.append(dialect.code(code, lang))
            case ListBlock():
                out.append(_list(block, dialect, depth))
            case Quote(inner):
                out.append(dialect.quote(render(inner, dialect, depth)))
            case Rule():
                out.append(dialect.rule())
            case Table(rows):
                out.append(dialect.table(grid(rows)))
            case Raw(text):
                out.append(dialect.raw(text))
    return out


def _list(block: ListBlock, dialect: Dialect, depth: int) -> Rendered:
    indent = dialect.list_indent * depth
    formatted: list[str] = []
    plain: list[str] = []
    for i, item in enumerate(block.items):
        mark = f"{block.start + i}." if block.ordered else "•"
        for j, (inner, r) in enumerate(zip(item, render(item, dialect, depth + 1),
                                           strict=True)):
            if isinstance(inner, ListBlock):  # a nested list writes its own indentation
                formatted.append(r.formatted)
                plain.append(r.plain)
                continue
            prefix = f"{indent}{mark} " if j == 0 else indent + dialect.list_hang
            formatted.append(prefix + r.formatted)
            plain.append(prefix + r.plain)
    return Rendered("\n".join(formatted), "\n".join(plain))
