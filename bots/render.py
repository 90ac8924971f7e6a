"""One block renderer for every platform: Markdown -> neutral blocks -> a dialect -> chunks.

The whole shared renderer is this one module, so that rendering a reply walks two modules:
this one and the platform's dialect (``bots/<platform>/``). In order:

* **Blocks.** The model's Markdown is parsed once (markdown-it-py: CommonMark + tables +
  strikethrough, raw HTML off) into frozen neutral values: blocks (:class:`Paragraph`,
  :class:`Heading`, :class:`CodeBlock`, :class:`ListBlock`, :class:`Quote`, :class:`Rule`,
  :class:`Table`, :class:`Raw`) holding inline spans (:class:`Text`, :class:`Break`,
  :class:`CodeSpan`, :class:`Styled`, :class:`Link`, :class:`Image`). A text without any
  Markdown (most short answers) skips the parser (:func:`plain_paragraphs`). Nothing here
  knows a platform.
* **A dialect** (:class:`Dialect`) says how one platform writes the blocks: its inline
  markup as data (:class:`InlineMarkup`: the escape, the templates of code spans, styles,
  links and images), how each kind of block looks, and the size rules (its limit, how it
  counts length, how much escaping can grow a character). The walk over the blocks
  (:func:`render`), the inline spans written from the markup (:meth:`Dialect.inline`) and
  the list layout are shared, so a paragraph is written here without a call back into the
  platform's module.
* **The splitter.** Whole blocks are packed into chunks, a blank line between them
  (:func:`pack_blocks`). A block longer than a chunk is cut first (:func:`split_block`): a
  code block between its lines into several closed code blocks (an enormous line by
  characters), never leaving a fence or a tag open; prose between lines, else between
  characters, never inside an entity (``&amp;``). A platform that renders Markdown itself
  keeps the source and splits it by lines instead (:func:`split_markdown_source`), each
  chunk closing the code fence it ends in and the next reopening it.

:func:`chunk` runs all three; :func:`to_markup` gives the whole text without a limit.
:class:`BlockRendering` is a platform client's ``render`` on :func:`chunk`, its dialect and
limit given as values (the layer's call lands here, not in a wrapper in the platform's folder).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from bots.format import Chunk

__all__ = [
    "EMPTY_ANSWER",
    "Block",
    "BlockRendering",
    "Break",
    "CodeBlock",
    "CodeSpan",
    "Dialect",
    "Heading",
    "Image",
    "Inline",
    "InlineMarkup",
    "Link",
    "ListBlock",
    "Paragraph",
    "Quote",
    "Raw",
    "Rendered",
    "Rule",
    "Styled",
    "Table",
    "Text",
    "chunk",
    "grid",
    "markdown_parser",
    "pack_blocks",
    "parse",
    "plain_paragraphs",
    "plain_text",
    "render",
    "split_block",
    "split_markdown_source",
    "to_markup",
    "utf16_len",
]

#: what an answer with nothing to show is sent as
EMPTY_ANSWER = "(empty answer)"


def utf16_len(text: str) -> int:
    """Length as Telegram and Discord count it (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


# -- text without Markdown -------------------------------------------------------------------

# Most short replies are plain sentences, and every dialect gives such a text's paragraphs
# back as they are, escaped: this finds them without the parser; any text it is not sure of
# goes to the parser.

#: A line Markdown leaves as it is: it starts with a letter (no list, heading, quote, fence,
#: indented code or setext/table marker) and holds only letters, digits, spaces and
#: punctuation without a meaning inline (no emphasis, code, link, escape, entity, autolink,
#: table pipe) and no trailing space (a hard break).
_PLAIN_LINE = re.compile(
    r"(?:[^\W\d_][^\W_]*"  # a letter first, then letters and digits
    r"(?:[ ,.;:?!'\"()/%@$+=>-]+[^\W_]+)*"  # runs of spaces/punctuation between words
    r"[,.;:?!'\")/%@$+=>-]*)?"  # punctuation at the end (no space)
)


def plain_paragraphs(markdown: str) -> list[str] | None:
    """The paragraphs of a text without Markdown, as CommonMark parses them (lines of one
    paragraph joined by a newline); None when any line may mean something."""
    lines = markdown.split("\n")
    if not all(_PLAIN_LINE.fullmatch(line) for line in lines):
        return None
    out: list[str] = []
    para: list[str] = []
    for line in [*lines, ""]:
        if line:
            para.append(line)
        elif para:
            out.append("\n".join(para))
            para = []
    return out


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
    them, without the parser; None when it may hold any (see :func:`plain_paragraphs`)."""
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


# -- dialects --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rendered:
    """One block in a dialect: its markup and its plain-text twin."""

    formatted: str
    plain: str
    #: the raw code of a code block (or a table's grid), so the splitter can cut it
    #: between lines into several closed blocks
    code: str | None = None
    lang: str = ""


@dataclass(frozen=True)
class InlineMarkup:
    """A dialect's inline markup as data, which :meth:`Dialect.inline` writes spans from.

    Values only, read here: the templates are :meth:`str.format` strings and the escapes
    callables from outside ``bots`` (e.g. :func:`html.escape`), so writing a reply's inline
    text makes no call back into the platform's module (a hop on every reply otherwise).
    """

    #: literal text made safe in this markup (text, code, an image's text)
    escape: Callable[[str], str]
    #: a link's address made safe inside :attr:`link`
    escape_href: Callable[[str], str]
    #: a code span, ``{}`` its escaped code
    code: str
    #: each style (``strong``, ``em``, ``strike``), ``{}`` its spans written
    styles: Mapping[str, str]
    #: a link is written as :attr:`link` only when its address starts with one of these;
    #: any other (``javascript:``, a relative path) as :attr:`unsafe_link`
    safe_schemes: tuple[str, ...]
    #: a link, ``{href}`` its escaped address and ``{text}`` its spans written
    link: str
    #: a link whose scheme is not safe (no link at all): ``{text}`` its spans written
    unsafe_link: str = "{text}"
    #: an image (written as text), ``{}`` its alt text escaped, or its address when it has
    #: none
    image: str = "{}"
    #: a line break inside a paragraph
    line_break: str = "\n"


class Dialect(ABC):
    """How a platform writes blocks (subclass per platform; see ``bots/<platform>/``).

    A dialect declares its inline markup as data (:attr:`markup`); one whose inline rules
    depend on a span's content or context, which templates cannot say, overrides
    :meth:`escape`, :meth:`inline` and :meth:`inline_plain` instead (Slack's mrkdwn).
    """

    #: the inline markup :meth:`escape` and :meth:`inline` read
    markup: ClassVar[InlineMarkup]

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

    def escape(self, text: str) -> str:
        """Literal text (code, plain pieces) made safe in this markup."""
        return self.markup.escape(text)

    def inline(self, spans: tuple[Inline, ...]) -> str:
        """Inline spans in this markup, written from :attr:`markup`."""
        m = self.markup
        out: list[str] = []
        for span in spans:
            match span:
                case Text(text):
                    out.append(m.escape(text))
                case Break():
                    out.append(m.line_break)
                case CodeSpan(code):
                    out.append(m.code.format(m.escape(code)))
                case Styled(style, children):
                    out.append(m.styles[style].format(self.inline(children)))
                case Link(href, children) if href.startswith(m.safe_schemes):
                    out.append(m.link.format(href=m.escape_href(href),
                                             text=self.inline(children)))
                case Link(children=children):
                    out.append(m.unsafe_link.format(text=self.inline(children)))
                case Image(src, alt):
                    out.append(m.image.format(m.escape(alt or src)))
        return "".join(out)

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


# -- the splitter ----------------------------------------------------------------------------


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
        text = EMPTY_ANSWER
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


# -- the whole -------------------------------------------------------------------------------


def to_markup(markdown: str, dialect: Dialect) -> str:
    """The whole text in the dialect's markup (no length limit applied)."""
    return "\n\n".join(r.formatted for r in render(parse(markdown), dialect) if r.formatted)


class BlockRendering:
    """The ``render`` of a platform client whose markup is a :class:`Dialect` of this
    renderer: a mixin naming the dialect and the platform's message limit as values."""

    #: how the platform writes the blocks
    dialect: ClassVar[Dialect]
    #: the platform's message limit, in the dialect's length units
    text_limit: ClassVar[int]

    def render(self, markdown: str) -> list[Chunk]:
        """The model's Markdown as chunks of the dialect within :attr:`text_limit`."""
        return chunk(markdown, self.dialect, limit=self.text_limit)


def chunk(markdown: str, dialect: Dialect, *, limit: int | None = None) -> list[Chunk]:
    """Render and split into chunks of at most ``limit`` (default: the dialect's) units of
    the dialect's length each; never an empty list."""
    limit = dialect.limit if limit is None else limit
    pieces = [p for r in render(parse(markdown), dialect)
              for p in split_block(r, dialect, limit)]
    if not pieces:
        return [dialect.empty(markdown.strip() or EMPTY_ANSWER, limit)]
    chunks = pack_blocks([Chunk(formatted=p.formatted, fallback=p.plain) for p in pieces],
                         limit=limit, length=dialect.length)
    return ([c for c in chunks if c.formatted.strip() or c.fallback.strip()]
            or [dialect.empty(EMPTY_ANSWER, limit)])
