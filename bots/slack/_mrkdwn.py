"""Model Markdown -> Slack mrkdwn: the Slack dialect of the shared renderer
(:mod:`bots.render`), in chunks that each stand alone.

No converter on PyPI fit: the two tried (``markdown_to_mrkdwn``, ``md2mrkdwn``) are regex
passes that turn ``a * b * c`` into italics, rewrite ``**`` inside inline code, and escape
neither ``&<>`` nor ``<!channel>``. So the neutral blocks are written as mrkdwn: ``*bold*``,
``_italic_``, ``~strike~``, ```` `code` ````, fenced blocks without a language tag (Slack
would print it), ``<url|label>`` links, ``>`` quotes, bullet lines; headings become bold
lines and tables a code grid.

Invariants: every ``&``, ``<`` and ``>`` of the model's text is escaped (Slack's rule), so a
model cannot produce ``<!here>`` / ``<!channel>`` pings or forged links; a chunk never
exceeds ``limit`` characters and never leaves a code fence open (a long code block is
split between lines into several closed blocks).
"""

from __future__ import annotations

import re

from bots.format import Chunk
from bots.render import (
    Break,
    CodeSpan,
    Dialect,
    Image,
    Inline,
    Link,
    Rendered,
    Styled,
    Text,
    chunk,
    to_markup,
)

__all__ = [
    "SLACK_LIMIT",
    "SLACK_MRKDWN",
    "SlackMrkdwn",
    "chunk_mrkdwn",
    "escape",
    "markdown_to_mrkdwn",
    "render_progress",
]

#: Slack truncates ``text`` beyond 40,000 characters and advises 4,000; stay under that.
SLACK_LIMIT = 3900
_FENCE = "```"
_SAFE_SCHEMES = ("http://", "https://", "mailto:")
_BACKTICK_RUN = re.compile(r"`(?=`)")
_MARKS = {"strong": "*", "em": "_", "strike": "~"}


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


def _inline(spans: tuple[Inline, ...], *, plain: bool) -> str:
    out: list[str] = []
    for span in spans:
        match span:
            case Text(text):
                out.append(_literal(text))
            case Break():
                out.append("\n")
            case CodeSpan(code):
                out.append(escape(code) if plain else _code_span(code))
            case Styled(style, children):
                inner = _inline(children, plain=plain)
                mark = _MARKS[style]
                out.append(inner if plain or not inner.strip() else f"{mark}{inner}{mark}")
            case Link() | Image():
                out.append(_link(span, plain=plain))
    return "".join(out)


def _link(span: Link | Image, *, plain: bool) -> str:
    if isinstance(span, Link):
        href, label = span.href, _inline(span.children, plain=True)
    else:
        href, label = span.src, escape(span.alt)
    if href.startswith(_SAFE_SCHEMES) and not plain:
        # ``|`` ends the URL part of a Slack link; a label cannot hold one either.
        url = escape(href).replace("|", "%7C")
        label = label.replace("|", "¦")
        return f"<{url}>" if not label or label == escape(href) else f"<{url}|{label}>"
    return label or escape(href)


class SlackMrkdwn(Dialect):
    """Slack's mrkdwn (``text`` of ``chat.postMessage``); the fallback is the same text
    without formatting markers, still escaped."""

    limit = SLACK_LIMIT
    list_indent = "    "
    list_hang = "   "
    escape_growth = 5  # "&amp;"
    #: mrkdwn markers hold per line: an oversized paragraph is cut in its markup
    cut_formatted = True

    # No ``markup`` (:class:`~bots.render.InlineMarkup`): mrkdwn's inline rules depend on a
    # span's content and context, which templates cannot say. A link's label is its spans
    # written without markers (a label cannot hold them), ``|`` replaced, and a label equal
    # to the address gives a bare ``<url>``; a style around blank text stays unmarked; text
    # and code spans break backtick runs (a code span also guards its ends), an escape of
    # their own beside the one of code blocks; the fallback is escaped too. So these three
    # methods stay, and the shared renderer calls them back.

    def escape(self, text: str) -> str:
        return escape(text)

    def inline(self, spans: tuple[Inline, ...]) -> str:
        return _inline(spans, plain=False)

    def inline_plain(self, spans: tuple[Inline, ...]) -> str:
        return _inline(spans, plain=True)

    def heading(self, spans: tuple[Inline, ...]) -> Rendered:
        plain = self.inline_plain(spans)
        return Rendered(f"*{plain}*" if plain.strip() else plain, plain)

    def code(self, code: str, lang: str) -> Rendered:
        body = escape(code)
        return Rendered(f"{_FENCE}\n{body}\n{_FENCE}", body, code=code)

    def quote(self, inner: list[Rendered]) -> Rendered:
        lines = [ln for b in inner for ln in b.formatted.splitlines()]
        return Rendered("\n".join(f"> {ln}" for ln in lines),
                        "\n".join(b.plain for b in inner))

    def table(self, grid: str) -> Rendered:
        return self.code(grid, "")

    def raw(self, text: str) -> Rendered:
        return Rendered(escape(text), escape(text))

    def empty(self, text: str, limit: int) -> Chunk:
        escaped = escape(text)[:limit]
        return Chunk(formatted=escaped, fallback=escaped)


SLACK_MRKDWN = SlackMrkdwn()


def markdown_to_mrkdwn(markdown: str) -> str:
    """The whole text as mrkdwn (no length limit applied)."""
    return to_markup(markdown, SLACK_MRKDWN)


def chunk_mrkdwn(markdown: str, *, limit: int = SLACK_LIMIT) -> list[Chunk]:
    """Render and pack whole blocks into chunks of at most ``limit`` characters.

    ``Chunk.formatted`` holds the mrkdwn, ``Chunk.fallback`` the same text without
    formatting markers (still escaped).
    """
    return chunk(markdown, SLACK_MRKDWN, limit=limit)


def render_progress(text: str) -> Chunk:
    """A progress message's plain lines as mrkdwn (``& < >`` escaped), and its fallback."""
    escaped = escape(text)
    return Chunk(formatted=escaped, fallback=escaped)
