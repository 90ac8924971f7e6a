"""Model Markdown -> Slack mrkdwn, in chunks that each stand alone.

No converter on PyPI fit: the two tried (``markdown_to_mrkdwn``, ``md2mrkdwn``) are regex
passes that turn ``a * b * c`` into italics, rewrite ``**`` inside inline code, and escape
neither ``&<>`` nor ``<!channel>``. So this walks markdown-it-py's tree (already used for
Telegram) and emits mrkdwn: ``*bold*``, ``_italic_``, ``~strike~``, ```` `code` ````,
fenced blocks without a language tag (Slack would print it), ``<url|label>`` links,
``>`` quotes, bullet lines; headings become bold lines and tables a code grid.

Invariants: every ``&``, ``<`` and ``>`` of the model's text is escaped (Slack's rule), so a
model cannot produce ``<!here>`` / ``<!channel>`` pings or forged links; a chunk never
exceeds ``limit`` characters and never leaves a code fence open (a long code block is
split between lines into several closed blocks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from bots.format import Chunk, pack_blocks
from bots.plain_text import plain_paragraphs

__all__ = ["SLACK_LIMIT", "chunk_mrkdwn", "escape", "markdown_to_mrkdwn", "render_progress"]

#: Slack truncates ``text`` beyond 40,000 characters and advises 4,000; stay under that.
SLACK_LIMIT = 3900
_FENCE = "```"
_md = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])
_SAFE_SCHEMES = ("http://", "https://", "mailto:")
_BACKTICK_RUN = re.compile(r"`(?=`)")


def escape(text: str) -> str:
    """Slack's three control characters as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _literal(text: str) -> str:
    """Escaped text whose backtick runs cannot open a code block.

    A fence-like run left as text (``:```` is an unclosed code span in Markdown, so plain
    text) would pair with a later ````` ``` ````` in the same message and turn what lies
    between into code: a zero-width space goes between adjacent backticks.
    """
    return _BACKTICK_RUN.sub("`\u200b", escape(text))


def _code_span(code: str) -> str:
    """```` `code` ````; backticks inside are kept apart from each other and from the
    delimiters (mrkdwn has no longer delimiters), so no run of three can appear."""
    body = _BACKTICK_RUN.sub("`\u200b", escape(code))
    if body.startswith("`"):
        body = "\u200b" + body
    if body.endswith("`"):
        body += "\u200b"
    return f"`{body}`"


@dataclass(frozen=True)
class _Block:
    text: str
    plain: str
    code: str | None = None  # raw code of a fence / table, for splitting


def _inline(node: SyntaxTreeNode, *, plain: bool = False) -> str:
    out: list[str] = []
    for child in node.children:
        t = child.type
        if t == "text":
            out.append(_literal(child.content))
        elif t in ("softbreak", "hardbreak"):
            out.append("\n")
        elif t == "code_inline":
            out.append(escape(child.content) if plain else _code_span(child.content))
        elif t in ("strong", "em", "s"):
            inner = _inline(child, plain=plain)
            mark = {"strong": "*", "em": "_", "s": "~"}[t]
            out.append(inner if plain or not inner.strip() else f"{mark}{inner}{mark}")
        elif t in ("link", "image"):
            href = str(child.attrs.get("href" if t == "link" else "src", ""))
            label = _inline(child, plain=True) if t == "link" else escape(child.content)
            if href.startswith(_SAFE_SCHEMES) and not plain:
                # ``|`` ends the URL part of a Slack link; a label cannot hold one either.
                url = escape(href).replace("|", "%7C")
                label = label.replace("|", "¦")
                out.append(f"<{url}>" if not label or label == escape(href) else f"<{url}|{label}>")
            else:
                out.append(label or escape(href))
        elif child.children:
            out.append(_inline(child, plain=plain))
        else:
            out.append(escape(child.content))
    return "".join(out)


def _code(code: str) -> _Block:
    body = escape(code)
    return _Block(text=f"{_FENCE}\n{body}\n{_FENCE}", plain=body, code=code)


def _table(node: SyntaxTreeNode) -> _Block:
    rows: list[list[str]] = []
    for section in node.children:
        for tr in section.children:
            rows.append([_plain_cell(cell) for cell in tr.children])
    width = max(map(len, rows)) if rows else 0
    widths = [max((len(r[i]) for r in rows if i < len(r)), default=0) for i in range(width)]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    return _code("\n".join(lines))


def _plain_cell(cell: SyntaxTreeNode) -> str:
    if not cell.children:
        return ""
    return "".join(c.content for c in cell.children[0].walk() if c.type in ("text",
                                                                            "code_inline"))


def _list(node: SyntaxTreeNode, depth: int) -> _Block:
    ordered = node.type == "ordered_list"
    start = int(node.attrs.get("start", 1) or 1) if ordered else 1
    indent = "    " * depth
    text_lines: list[str] = []
    plain_lines: list[str] = []
    for i, item in enumerate(node.children):
        mark = f"{start + i}." if ordered else "•"
        for j, b in enumerate(_blocks(item, depth + 1)):
            nested = b.text.startswith(indent + "    ")
            prefix = f"{indent}{mark} " if j == 0 else f"{indent}   "
            text_lines.append(b.text if nested else prefix + b.text)
            plain_lines.append(b.plain if nested else prefix + b.plain)
    return _Block(text="\n".join(text_lines), plain="\n".join(plain_lines))


def _blocks(node: SyntaxTreeNode, depth: int = 0) -> list[_Block]:
    out: list[_Block] = []
    for child in node.children:
        t = child.type
        if t == "paragraph":
            inl = child.children[0] if child.children else child
            out.append(_Block(text=_inline(inl), plain=_inline(inl, plain=True)))
        elif t == "heading":
            inl = child.children[0]
            plain = _inline(inl, plain=True)
            out.append(_Block(text=f"*{plain}*" if plain.strip() else plain, plain=plain))
        elif t in ("fence", "code_block"):
            out.append(_code(child.content.rstrip("\n")))
        elif t in ("bullet_list", "ordered_list"):
            out.append(_list(child, depth))
        elif t == "blockquote":
            inner = _blocks(child, depth)
            lines = [ln for b in inner for ln in b.text.splitlines()]
            out.append(_Block(text="\n".join(f"> {ln}" for ln in lines),
                              plain="\n".join(b.plain for b in inner)))
        elif t == "hr":
            out.append(_Block(text="———", plain="———"))
        elif t == "table":
            out.append(_table(child))
        elif child.content.strip():
            text = escape(child.content.rstrip())
            out.append(_Block(text=text, plain=text))
    return out


def _render(markdown: str) -> list[_Block]:
    plain = _plain_blocks(markdown)
    if plain is not None:
        return plain
    return _parsed_blocks(markdown)


def _plain_blocks(markdown: str) -> list[_Block] | None:
    """The blocks of a text without Markdown (most short answers) without the parser, as
    it would give them; None when it may hold any (see :mod:`bots.plain_text`)."""
    paragraphs = plain_paragraphs(markdown)
    if paragraphs is None:
        return None
    return [_Block(text=_literal(p), plain=_literal(p)) for p in paragraphs]


def _parsed_blocks(markdown: str) -> list[_Block]:
    return _blocks(SyntaxTreeNode(_md.parse(markdown)))


def markdown_to_mrkdwn(markdown: str) -> str:
    """The whole text as mrkdwn (no length limit applied)."""
    return "\n\n".join(b.text for b in _render(markdown) if b.text)


def _split(block: _Block, limit: int) -> list[_Block]:
    if len(block.text) <= limit:
        return [block]
    if block.code is not None:
        budget = limit - 2 * len(_FENCE) - 2
        pieces: list[_Block] = []
        lines: list[str] = []
        size = 0
        for line in block.code.split("\n"):
            while len(escape(line)) > budget:  # one enormous line: cut it by characters
                if lines:
                    pieces.append(_code("\n".join(lines)))
                    lines, size = [], 0
                cut = budget // 5 or 1  # "&amp;" is five characters
                pieces.append(_code(line[:cut]))
                line = line[cut:]
            n = len(escape(line)) + 1
            if lines and size + n > budget:
                pieces.append(_code("\n".join(lines)))
                lines, size = [], 0
            lines.append(line)
            size += n
        if lines:
            pieces.append(_code("\n".join(lines)))
        return pieces
    # Oversized prose: cut between lines, else between characters. mrkdwn markers are
    # per line, so a line cut keeps formatting; a character cut may split one (rare).
    out: list[_Block] = []
    text = block.text
    while text:
        cut = text.rfind("\n", 0, limit)
        cut = cut if cut > limit // 2 else limit
        # Never split an entity (``&amp;``) in two.
        amp = text.rfind("&", max(0, cut - 5), cut)
        if amp != -1 and ";" not in text[amp:cut]:
            cut = amp or cut
        part, text = text[:cut], text[cut:].lstrip("\n")
        out.append(_Block(text=part, plain=part))
    return out


def chunk_mrkdwn(markdown: str, *, limit: int = SLACK_LIMIT) -> list[Chunk]:
    """Render and pack whole blocks into chunks of at most ``limit`` characters.

    ``Chunk.formatted`` holds the mrkdwn, ``Chunk.fallback`` the same text without
    formatting markers (still escaped).
    """
    blocks: list[_Block] = []
    for b in _render(markdown):
        blocks.extend(_split(b, limit))
    if not blocks:
        text = escape(markdown.strip() or "(empty answer)")[:limit]
        return [Chunk(formatted=text, fallback=text)]
    chunks = pack_blocks([Chunk(formatted=b.text, fallback=b.plain) for b in blocks],
                         limit=limit)
    return [c for c in chunks if c.formatted.strip()] or [
        Chunk(formatted="(empty answer)", fallback="(empty answer)")]


def render_progress(text: str) -> Chunk:
    """A progress message's plain lines as mrkdwn (``& < >`` escaped), and its fallback."""
    escaped = escape(text)
    return Chunk(formatted=escaped, fallback=escaped)
