"""One block renderer for every platform: Markdown -> neutral blocks -> a dialect -> chunks.

The model's Markdown is parsed once into neutral blocks (:mod:`bots.render._blocks`). A
platform's *dialect* (:class:`Dialect`, in ``bots/<platform>/``) says how to write inline
styles and escapes, how each block looks, and its size rules; the walk and the splitter
(:mod:`bots.render._split`: code blocks closed in every chunk, never a cut inside an entity)
are shared. A platform that renders Markdown itself keeps the source and splits it with
:func:`split_markdown_source` (fences balanced per chunk).
"""

from __future__ import annotations

from bots.format import Chunk
from bots.render._blocks import (
    Block,
    Break,
    CodeBlock,
    CodeSpan,
    Heading,
    Image,
    Inline,
    Link,
    ListBlock,
    Paragraph,
    Quote,
    Raw,
    Rule,
    Styled,
    Table,
    Text,
    markdown_parser,
    parse,
    plain_text,
)
from bots.render._dialect import Dialect, Rendered, grid, render
from bots.render._split import pack_blocks, split_block, split_markdown_source

__all__ = [
    "EMPTY_ANSWER",
    "Block",
    "Break",
    "CodeBlock",
    "CodeSpan",
    "Dialect",
    "Heading",
    "Image",
    "Inline",
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
    "plain_text",
    "render",
    "split_block",
    "split_markdown_source",
    "to_markup",
]

#: what an answer with nothing to show is sent as
EMPTY_ANSWER = "(empty answer)"


def to_markup(markdown: str, dialect: Dialect) -> str:
    """The whole text in the dialect's markup (no length limit applied)."""
    return "\n\n".join(r.formatted for r in render(parse(markdown), dialect) if r.formatted)


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
