"""The shared block renderer: Markdown parsed once into neutral blocks, a dialect writes
them, one splitter keeps every chunk within its limit with code blocks closed."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bots.discord.format import chunk_fenced_markdown
from bots.format import Chunk
from bots.render import (
    CodeBlock,
    Dialect,
    Heading,
    Image,
    Inline,
    InlineMarkup,
    Link,
    ListBlock,
    Paragraph,
    Rendered,
    Styled,
    Table,
    Text,
    chunk,
    parse,
    to_markup,
)
from bots.slack import chunk_mrkdwn
from bots.telegram.format import chunk_markdown
from tests.bots._walk import module_walk


def test_markdown_is_parsed_once_into_neutral_blocks() -> None:
    md = ("# T\n\n- a\n  - b\n\n```py\nx < y\n```\n\n| a | b |\n|-|-|\n| 1 | **2** |\n\n"
          "See [x](http://y) ![i](http://z) *it*")
    assert parse(md) == (
        Heading(1, (Text("T"),)),
        ListBlock(False, 1, ((Paragraph((Text("a"),)),
                               ListBlock(False, 1, ((Paragraph((Text("b"),)),),))),)),
        CodeBlock("x < y", "py"),
        Table((("a", "b"), ("1", "2"))),
        Paragraph((Text("See "), Link("http://y", (Text("x"),)), Text(" "),
                   Image("http://z", "i", (Text("i"),)), Text(" "),
                   Styled("em", (Text("it"),)))),
    )


class _Brackets(Dialect):
    """A platform written in a few lines: styles as [b:...], code as <<< ... >>>."""

    limit = 80
    markup = InlineMarkup(
        # ">" too: a ">>>" in the text would read as the end of a code block
        escape=lambda text: text.replace("<", "&lt;").replace(">", "&gt;"), escape_href=str,
        code="{}",
        styles={s: f"[{s}:{{}}]" for s in ("strong", "em", "strike")},
        safe_schemes=("https://",), link="[{text}]({href})")

    def heading(self, spans: tuple[Inline, ...]) -> Rendered:
        return Rendered(f"== {self.inline(spans)}", self.inline_plain(spans))

    def code(self, code: str, lang: str) -> Rendered:
        return Rendered(f"<<<{lang}\n{self.escape(code)}\n>>>", code, code=code, lang=lang)

    def quote(self, inner: list[Rendered]) -> Rendered:
        return Rendered("\n".join("| " + r.formatted for r in inner),
                        "\n".join(r.plain for r in inner))

    def table(self, grid: str) -> Rendered:
        return self.code(grid, "")

    def empty(self, text: str, limit: int) -> Chunk:
        return Chunk(formatted=self.escape(text)[:limit], fallback=text[:limit])


def test_a_new_dialect_gets_the_walk_lists_and_splitter_for_free() -> None:
    d = _Brackets()
    assert to_markup("# Hi\n\n**b** <x>\n\n1. one\n2. two\n   - sub", d) == (
        "== Hi\n\n[strong:b] &lt;x&gt;\n\n1. one\n2. two\n  • sub")
    # its inline markup is data: links only to a safe scheme, an image as its alt or address
    assert to_markup("[*a*](https://x) [b](/y) ![c](https://i) ![](https://j)",
                     d) == "[[em:a]](https://x) b c https://j"
    code = "\n".join(f"line {i} <" for i in range(40))
    chunks = chunk(f"intro\n\n```sh\n{code}\n```\n\nend", d)
    assert len(chunks) > 3
    for c in chunks:
        assert len(c.formatted) <= d.limit
        assert c.formatted.count("<<<") == c.formatted.count(">>>")  # every block closed
    shown = "\n".join(c.fallback for c in chunks)
    assert all(shown.count(f"line {i} <") == 1 for i in range(40))


def test_an_answer_that_renders_to_nothing_is_still_one_message() -> None:
    # Telegram used to give no chunk at all for an empty list ("*"): nothing was sent
    for md in ("*", "-", "1."):
        assert [c.fallback for c in chunk_markdown(md)] == ["(empty answer)"]
        assert [c.formatted for c in chunk_mrkdwn(md)] == ["(empty answer)"]


def test_a_list_item_keeps_its_bullet_whatever_its_block_starts_with() -> None:
    # a table whose first cell is empty starts with spaces: it was taken for a nested list
    # (which writes its own indentation) and the item lost its bullet
    md = "- | | b |\n  |-|-|\n  | 1 | 2 |"
    [c] = chunk_markdown(md)
    assert c.formatted.startswith("• <pre>") and c.fallback.startswith("• ")
    # an empty nested list writes no line of its own (it was a line of stray spaces)
    assert to_markup("- a\n\n  -\n", _Brackets()).splitlines() == ["• a"]


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.sampled_from("ab *_~`#>-|[]()<>&\n:/1. "), max_size=500),
       st.integers(min_value=30, max_value=300))
def test_any_markdown_in_any_dialect_is_bounded_and_closed(md: str, limit: int) -> None:
    for c in chunk(md, _Brackets(), limit=limit):
        assert 0 < len(c.formatted) <= limit
        assert c.formatted.count("<<<") == c.formatted.count(">>>")


#: an answer that takes every path of the renderer: the parser, every kind of block, a list,
#: a table, an entity, a code block longer than a message (split), a paragraph cut
_EVERYTHING = ("# Title\n\n- one **bold** `code`\n  - nested [link](https://x.org)\n\n"
               "| a | b |\n|-|-|\n| 1 | 2 |\n\n> quoted & <odd>\n\n---\n\n"
               "```py\n" + "x = 1  # a line of code\n" * 400 + "```\n\n" + "word " * 2000)


@functools.cache  # built by the warm-up call, outside the measured walk
def _telegram_connector() -> Any:
    from bots.telegram import TelegramConnector

    return TelegramConnector(host=None, token="1:x")  # type: ignore[arg-type]  # not used


@pytest.mark.parametrize(("dialect", "render"), [
    ("bots.telegram.format", lambda: chunk_markdown(_EVERYTHING)),
    ("bots.telegram.format", lambda: _telegram_connector().render(_EVERYTHING)),
    ("bots.slack._mrkdwn", lambda: chunk_mrkdwn(_EVERYTHING)),
    ("bots.discord.format", lambda: chunk_fenced_markdown(_EVERYTHING)),
], ids=["telegram", "telegram-connector", "slack", "discord"])
def test_rendering_a_reply_walks_the_shared_renderer_and_the_dialect_only(
        dialect: str, render: Callable[[], Any]) -> None:
    # the shared renderer is one module: a reply goes from the platform's dialect into it
    # and back (the dialect's block methods; Slack's inline ones), through no other module
    render()  # imports done: only the rendering is measured
    with module_walk() as walk:
        render()
    edges = walk.edges
    assert (dialect, "bots.render") in edges
    assert edges <= {(dialect, "bots.render"), ("bots.render", dialect)}, sorted(edges)


def test_a_reply_of_paragraphs_makes_no_call_back_into_telegrams_module() -> None:
    # Telegram's inline markup is data the shared renderer writes from (html.escape and tag
    # templates): paragraphs of every kind of span, one cut for its length, are rendered in
    # bots.render alone (it called TelegramHtml.inline back on every reply)
    md = ("**b _i_ ~~s~~** `<c>` [l](https://x?a=1&b=\"2\") [u](ftp://x) ![a](https://i)"
          " ![](https://j) & 😀  \nnext\n\n" + "word " * 2000)
    chunk_markdown(md)  # imports done: only the rendering is measured
    with module_walk() as walk:
        chunk_markdown(md)
    assert walk.edges == {("bots.telegram.format", "bots.render")}, sorted(walk.edges)
