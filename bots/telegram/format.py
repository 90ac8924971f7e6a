"""Model Markdown -> Telegram HTML, in chunks with their plain-text fallback.

Parsing is markdown-it-py's (CommonMark + tables + strikethrough); rendering walks its
syntax tree and emits only the tags Telegram's HTML accepts (``b i s u code pre a
blockquote``): headings become bold lines, lists bullets, tables a ``<pre>`` grid. Every
chunk carries its plain-text twin, sent instead when Telegram rejects the markup.

Chunking packs whole blocks up to the limit; a code block longer than the limit is split
between lines into several closed ``<pre>`` blocks (never a tag cut in half).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from markdown_it.tree import SyntaxTreeNode

from bots.format import Chunk, markdown_parser, pack_blocks, utf16_len
from bots.plain_text import plain_paragraphs

__all__ = [
    "TELEGRAM_LIMIT",
    "chunk_markdown",
    "markdown_to_telegram_html",
    "render_progress",
]

TELEGRAM_LIMIT = 4096


@dataclass(frozen=True)
class _Block:
    html: str
    plain: str
    code: str | None = None  # raw code of a fence, for splitting
    lang: str = ""


def _esc(text: str) -> str:
    return html.escape(text, quote=False)


def _inline(node: SyntaxTreeNode) -> str:
    out: list[str] = []
    for child in node.children:
        t = child.type
        if t == "text":
            out.append(_esc(child.content))
        elif t in ("softbreak", "hardbreak"):
            out.append("\n")
        elif t == "code_inline":
            out.append(f"<code>{_esc(child.content)}</code>")
        elif t == "strong":
            out.append(f"<b>{_inline(child)}</b>")
        elif t == "em":
            out.append(f"<i>{_inline(child)}</i>")
        elif t == "s":
            out.append(f"<s>{_inline(child)}</s>")
        elif t == "link":
            href = str(child.attrs.get("href", ""))
            inner = _inline(child)
            if href.startswith(("http://", "https://", "tg://", "mailto:")):
                out.append(f'<a href="{html.escape(href, quote=True)}">{inner}</a>')
            else:
                out.append(inner)
        elif t == "image":
            out.append(_esc(child.content or str(child.attrs.get("src", ""))))
        elif child.children:
            out.append(_inline(child))
        else:
            out.append(_esc(child.content))
    return "".join(out)


def _inline_plain(node: SyntaxTreeNode) -> str:
    out: list[str] = []
    for child in node.children:
        if child.type in ("softbreak", "hardbreak"):
            out.append("\n")
        elif child.children:
            out.append(_inline_plain(child))
        else:
            out.append(child.content)
    return "".join(out)


def _table(node: SyntaxTreeNode) -> _Block:
    rows: list[list[str]] = []
    for section in node.children:
        for tr in section.children:
            rows.append([_inline_plain(cell.children[0]) if cell.children else ""
                         for cell in tr.children])
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(max(map(len, rows)))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    text = "\n".join(lines)
    return _Block(html=f"<pre>{_esc(text)}</pre>", plain=text, code=text)


def _blocks(node: SyntaxTreeNode, depth: int = 0) -> list[_Block]:
    out: list[_Block] = []
    for child in node.children:
        t = child.type
        if t == "paragraph":
            inl = child.children[0] if child.children else child
            out.append(_Block(html=_inline(inl), plain=_inline_plain(inl)))
        elif t == "heading":
            inl = child.children[0]
            out.append(_Block(html=f"<b>{_inline(inl)}</b>", plain=_inline_plain(inl)))
        elif t in ("fence", "code_block"):
            code = child.content.rstrip("\n")
            lang = (child.info or "").split(" ")[0] if t == "fence" else ""
            out.append(_code_block(code, lang))
        elif t in ("bullet_list", "ordered_list"):
            out.append(_list(child, depth))
        elif t == "blockquote":
            inner = _blocks(child, depth)
            out.append(_Block(
                html="<blockquote>" + "\n".join(b.html for b in inner) + "</blockquote>",
                plain="\n".join("> " + line for b in inner for line in b.plain.splitlines()),
            ))
        elif t == "hr":
            out.append(_Block(html="———", plain="———"))
        elif t == "table":
            out.append(_table(child))
        else:
            text = child.content or ""
            if text.strip():
                out.append(_Block(html=_esc(text.rstrip()), plain=text.rstrip()))
    return out


def _code_block(code: str, lang: str) -> _Block:
    cls = f' class="language-{html.escape(lang, quote=True)}"' if lang else ""
    return _Block(html=f"<pre><code{cls}>{_esc(code)}</code></pre>",
                  plain=f"```{lang}\n{code}\n```", code=code, lang=lang)


def _list(node: SyntaxTreeNode, depth: int) -> _Block:
    ordered = node.type == "ordered_list"
    start = int(node.attrs.get("start", 1) or 1) if ordered else 1
    h_lines: list[str] = []
    p_lines: list[str] = []
    indent = "  " * depth
    for i, item in enumerate(node.children):
        mark = f"{start + i}." if ordered else "•"
        inner = _blocks(item, depth + 1)
        for j, b in enumerate(inner):
            prefix = f"{indent}{mark} " if j == 0 else f"{indent}  "
            # a nested list renders its own indentation; other blocks get the item's
            nested = b.plain.startswith(indent + "  ")
            h_lines.append(b.html if nested else prefix + b.html)
            p_lines.append(b.plain if nested else prefix + b.plain)
    return _Block(html="\n".join(h_lines), plain="\n".join(p_lines))


def _plain_blocks(markdown: str) -> list[_Block] | None:
    """The blocks of a text without Markdown (most short answers), as the parser would give
    them; None when it may hold any (see :mod:`bots.plain_text`)."""
    paragraphs = plain_paragraphs(markdown)
    if paragraphs is None:
        return None
    return [_Block(html=_esc(p), plain=p) for p in paragraphs]


def _render_blocks(markdown: str) -> list[_Block]:
    plain = _plain_blocks(markdown)
    if plain is not None:
        return plain
    return _parsed_blocks(markdown)


def _parsed_blocks(markdown: str) -> list[_Block]:
    return _blocks(SyntaxTreeNode(markdown_parser.parse(markdown)))


def markdown_to_telegram_html(markdown: str) -> str:
    """The whole text as Telegram HTML (no length limit applied)."""
    return "\n\n".join(b.html for b in _render_blocks(markdown) if b.html)


def _split_long(block: _Block, limit: int) -> list[_Block]:
    if utf16_len(block.html) <= limit:
        return [block]
    if block.code is not None:
        pieces: list[_Block] = []
        lines: list[str] = []
        # room for <pre><code class="language-…"></code></pre>, whatever the language
        budget = max(limit - utf16_len(_code_block("", block.lang).html), 1)
        for line in block.code.split("\n"):
            while utf16_len(_esc(line)) > budget:  # one enormous line: cut it by characters
                cut = budget // 6 or 1
                if lines:
                    pieces.append(_code_block("\n".join(lines), block.lang))
                    lines = []
                pieces.append(_code_block(line[:cut], block.lang))
                line = line[cut:]
            if lines and utf16_len(_esc("\n".join([*lines, line]))) > budget:
                pieces.append(_code_block("\n".join(lines), block.lang))
                lines = []
            lines.append(line)
        if lines:
            pieces.append(_code_block("\n".join(lines), block.lang))
        return pieces
    # Oversized prose: formatting of this one block is dropped rather than cut mid-tag.
    out: list[_Block] = []
    text = block.plain
    step = limit // 6 or 1  # escaping can grow a character to 6 ("&quot;")
    while text:
        cut = text.rfind("\n", 0, step)
        cut = cut if cut > step // 2 else step
        part, text = text[:cut], text[cut:].lstrip("\n")
        out.append(_Block(html=_esc(part), plain=part))
    return out


def chunk_markdown(markdown: str, *, limit: int = TELEGRAM_LIMIT) -> list[Chunk]:
    """Render and split into chunks of at most ``limit`` UTF-16 units of HTML each."""
    blocks: list[_Block] = []
    for b in _render_blocks(markdown):
        blocks.extend(_split_long(b, limit))
    if not blocks:
        text = markdown.strip() or "(empty answer)"
        return [Chunk(formatted=_esc(text[:limit // 6]), fallback=text[:limit])]
    chunks = pack_blocks([Chunk(formatted=b.html, fallback=b.plain) for b in blocks], limit=limit,
                         length=utf16_len)
    return [c for c in chunks if c.formatted.strip() or c.fallback.strip()]


def render_progress(text: str) -> Chunk:
    """A progress message's plain lines as Telegram HTML (escaped) with their fallback."""
    return Chunk(formatted=_esc(text), fallback=text)
