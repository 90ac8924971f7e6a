"""The neutral block model: the model's Markdown parsed once, before any platform's markup.

Parsing is markdown-it-py's (CommonMark + tables + strikethrough, raw HTML off). Its syntax
tree becomes frozen values: blocks (:class:`Paragraph`, :class:`Heading`,
:class:`CodeBlock`, :class:`ListBlock`, :class:`Quote`, :class:`Rule`, :class:`Table`,
:class:`Raw`) holding inline spans (:class:`Text`, :class:`Break`, :class:`CodeSpan`,
:class:`Styled`, :class:`Link`, :class:`Image`). A dialect (:mod:`bots.render._dialect`)
writes them in a platform's markup; nothing here knows a platform.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from bots.plain_text import plain_paragraphs

__all__ = [
    "Block",
    "Break",
    "CodeBlock",
    "CodeSpan",
    "Heading",
    "Image",
    "Inline",
    "Link",
    "ListBlock",
    "Paragraph",
    "Quote",
    "Raw",
    "Rule",
    "Styled",
    "Table",
    "Text",
    "markdown_parser",
    "parse",
    "plain_text",
]

#: CommonMark + tables + strikethrough, raw HTML off (the one parser every renderer uses)
markdown_parser = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])


# -- inline spans ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Break:
    """A line break inside a paragraph (soft or hard: every dialect writes a newline)."""


@dataclass(frozen=True)
class CodeSpan:
    code: str


@dataclass(frozen=True)
class Styled:
    style: Literal["strong", "em", "strike"]
    children: tuple[Inline, ...]


@dataclass(frozen=True)
class Link:
    href: str
    children: tuple[Inline, ...]


@dataclass(frozen=True)
class Image:
    src: str
    #: the label's source text, as written between ``![`` and ``]``
    alt: str
    children: tuple[Inline, ...]


Inline = Text | Break | CodeSpan | Styled | Link | Image


# -- blocks ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Paragraph:
    inlines: tuple[Inline, ...]


@dataclass(frozen=True)
class Heading:
    level: int
    inlines: tuple[Inline, ...]


@dataclass(frozen=True)
class CodeBlock:
    code: str
    #: the fence's language tag ("" for none and for indented code)
    lang: str = ""


@dataclass(frozen=True)
class ListBlock:
    ordered: bool
    start: int
    items: tuple[tuple[Block, ...], ...]


@dataclass(frozen=True)
class Quote:
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Rule:
    pass


@dataclass(frozen=True)
class Table:
    """Rows of cells as plain text (every dialect draws a monospaced grid)."""

    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Raw:
    """A block the model above does not name, as its text (right-stripped, never blank)."""

    text: str


Block = Paragraph | Heading | CodeBlock | ListBlock | Quote | Rule | Table | Raw

_STYLES: dict[str, Literal["strong", "em", "strike"]] = {
    "strong": "strong", "em": "em", "s": "strike"}


def plain_text(inlines: tuple[Inline, ...]) -> str:
    """The spans' text without any formatting (a table cell, a plain-text fallback)."""
    out: list[str] = []
    for span in inlines:
        match span:
            case Text(text):
                out.append(text)
            case CodeSpan(code):
                out.append(code)
            case Break():
                out.append("\n")
            case Styled(children=children) | Link(children=children) | Image(children=children):
                out.append(plain_text(children))
    return "".join(out)


def _inlines(node: SyntaxTreeNode) -> tuple[Inline, ...]:
    out: list[Inline] = []
    for child in node.children:
        t = child.type
        if t == "text":
            out.append(Text(child.content))
        elif t in ("softbreak", "hardbreak"):
            out.append(Break())
        elif t == "code_inline":
            out.append(CodeSpan(child.content))
        elif t in _STYLES:
            out.append(Styled(_STYLES[t], _inlines(child)))
        elif t == "link":
            out.append(Link(str(child.attrs.get("href", "")), _inlines(child)))
        elif t == "image":
            out.append(Image(str(child.attrs.get("src", "")), child.content, _inlines(child)))
        elif child.children:
            out.extend(_inlines(child))
        else:
            out.append(Text(child.content))
    return tuple(out)


def _table(node: SyntaxTreeNode) -> Table:
    rows: list[tuple[str, ...]] = []
    for section in node.children:
        for tr in section.children:
            rows.append(tuple(plain_text(_inlines(cell.children[0])) if cell.children else ""
                              for cell in tr.children))
    return Table(tuple(rows))


def _blocks(node: SyntaxTreeNode) -> tuple[Block, ...]:
    out: list[Block] = []
    for child in node.children:
        t = child.type
        if t == "paragraph":
            out.append(Paragraph(_inlines(child.children[0]) if child.children else ()))
        elif t == "heading":
            out.append(Heading(int(child.tag[1:] or 1), _inlines(child.children[0])))
        elif t in ("fence", "code_block"):
            lang = (child.info or "").split(" ")[0] if t == "fence" else ""
            out.append(CodeBlock(child.content.rstrip("\n"), lang))
        elif t in ("bullet_list", "ordered_list"):
            ordered = t == "ordered_list"
            start = int(child.attrs.get("start", 1) or 1) if ordered else 1
            out.append(ListBlock(ordered, start, tuple(_blocks(item) for item in child.children)))
        elif t == "blockquote":
            out.append(Quote(_blocks(child)))
        elif t == "hr":
            out.append(Rule())
        elif t == "table":
            out.append(_table(child))
        elif (child.content or "").strip():
            out.append(Raw(child.content.rstrip()))
    return tuple(out)


def _plain_blocks(markdown: str) -> tuple[Block, ...] | None:
    """The blocks of a text without Markdown (most short answers), as the parser would give
    them, without the parser; None when it may hold any (see :mod:`bots.plain_text`)."""
    paragraphs = plain_paragraphs(markdown)
    if paragraphs is None:
        return None
    out: list[Block] = []
    for p in paragraphs:
        spans: list[Inline] = []
        for i, line in enumerate(p.split("\n")):
            if i:
                spans.append(Break())
            spans.append(Text(line))
        out.append(Paragraph(tuple(spans)))
    return tuple(out)


def _parsed_blocks(markdown: str) -> tuple[Block, ...]:
    return _blocks(SyntaxTreeNode(markdown_parser.parse(markdown)))


def parse(markdown: str) -> tuple[Block, ...]:
    """The model's Markdown as neutral blocks (a plain text skips the parser)."""
    plain = _plain_blocks(markdown)
    if plain is not None:
        return plain
    return _parsed_blocks(markdown)
