"""Model Markdown -> Telegram HTML: the Telegram dialect of the shared renderer
(:mod:`bots.render`), in chunks with their plain-text fallback; and the connector's render
part (:class:`TelegramRenderer`: the shared renderer's ``render`` with this dialect as a value,
so the layer's call lands in :mod:`bots.render`). The dialect's inline markup is data
(:class:`~bots.render.InlineMarkup`: :func:`html.escape` and tag templates) the shared renderer
writes a paragraph from, so a reply's text makes no call back into this module; only a block
with markup of its own (a heading, a code block, a quote, a table) calls its method here.

Only the tags Telegram's HTML accepts (``b i s u code pre a blockquote``): headings become
bold lines, lists bullets, tables a ``<pre>`` grid. Every chunk carries its plain-text twin,
sent instead when Telegram rejects the markup. Lengths are UTF-16 units (Telegram's count).
HTML tags span lines, so an oversized paragraph is cut as plain text (its formatting
dropped), never mid-tag; a long code block becomes several closed ``<pre>`` blocks.
"""

from __future__ import annotations

import functools
import html
from typing import ClassVar

from bots.format import Chunk
from bots.render import (
    BlockRendering,
    Dialect,
    Inline,
    InlineMarkup,
    Rendered,
    chunk,
    to_markup,
    utf16_len,
)

__all__ = [
    "TELEGRAM_HTML",
    "TELEGRAM_LIMIT",
    "TelegramHtml",
    "TelegramRenderer",
    "chunk_markdown",
    "markdown_to_telegram_html",
    "render_progress",
]

TELEGRAM_LIMIT = 4096

#: text escaped for Telegram HTML (quotes need no entity outside an attribute); the stdlib
#: function itself, so the shared renderer escaping with it is no call into this module
_esc = functools.partial(html.escape, quote=False)


class TelegramHtml(Dialect):
    """Telegram's HTML parse mode."""

    limit = TELEGRAM_LIMIT
    #: kept from the first splitter: html.escape's widest entity (``&quot;``) is 6
    escape_growth = 6

    #: UTF-16 units, Telegram's count (the shared function itself: measuring a chunk is not a
    #: call back into this module)
    length = staticmethod(utf16_len)

    #: read by the shared renderer (no ``inline`` or ``escape`` here): a link only to a
    #: scheme Telegram opens, any other written as its text; an image as its alt text (else
    #: its address)
    markup = InlineMarkup(
        escape=_esc,
        escape_href=functools.partial(html.escape, quote=True),
        code="<code>{}</code>",
        styles={"strong": "<b>{}</b>", "em": "<i>{}</i>", "strike": "<s>{}</s>"},
        safe_schemes=("http://", "https://", "tg://", "mailto:"),
        link='<a href="{href}">{text}</a>',
    )

    def heading(self, spans: tuple[Inline, ...]) -> Rendered:
        return Rendered(f"<b>{self.inline(spans)}</b>", self.inline_plain(spans))

    def code(self, code: str, lang: str) -> Rendered:
        cls = f' class="language-{html.escape(lang, quote=True)}"' if lang else ""
        return Rendered(f"<pre><code{cls}>{_esc(code)}</code></pre>",
                        f"```{lang}\n{code}\n```", code=code, lang=lang)

    def quote(self, inner: list[Rendered]) -> Rendered:
        return Rendered(
            "<blockquote>" + "\n".join(b.formatted for b in inner) + "</blockquote>",
            "\n".join("> " + line for b in inner for line in b.plain.splitlines()))

    def table(self, grid: str) -> Rendered:
        return Rendered(f"<pre>{_esc(grid)}</pre>", grid, code=grid)

    def empty(self, text: str, limit: int) -> Chunk:
        return Chunk(formatted=_esc(text[:limit // 6]), fallback=text[:limit])


TELEGRAM_HTML = TelegramHtml()


def markdown_to_telegram_html(markdown: str) -> str:
    """The whole text as Telegram HTML (no length limit applied)."""
    return to_markup(markdown, TELEGRAM_HTML)


def chunk_markdown(markdown: str, *, limit: int = TELEGRAM_LIMIT) -> list[Chunk]:
    """Render and split into chunks of at most ``limit`` UTF-16 units of HTML each."""
    return chunk(markdown, TELEGRAM_HTML, limit=limit)


def render_progress(text: str) -> Chunk:
    """A progress message's plain lines as Telegram HTML (escaped) with their fallback."""
    return Chunk(formatted=_esc(text), fallback=text)


class TelegramRenderer(BlockRendering):
    """The render part of :class:`~bots.telegram.connector.TelegramConnector` (a mixin, as
    its client and inbound halves are): the connector's ``render`` (the shared renderer's,
    with Telegram's dialect) and ``render_progress``."""

    dialect: ClassVar[Dialect] = TELEGRAM_HTML
    #: Telegram's message limit (UTF-16 units)
    text_limit: ClassVar[int] = TELEGRAM_LIMIT

    def render_progress(self, text: str) -> Chunk:
        """Plain progress lines, escaped for Telegram HTML."""
        return render_progress(text)
