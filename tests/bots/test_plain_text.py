"""The shortcut for answers without Markdown (most short replies skip the parser) renders
exactly what the parser would, on Telegram and on Slack, and is taken only for text it is
sure of."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bots import render
from bots.slack import _mrkdwn as slack
from bots.telegram import format as telegram

#: letters, digits, spaces, line breaks, the punctuation the shortcut accepts and the
#: characters that make Markdown (so texts near the shortcut's edge are drawn often)
_ALPHABET = "aZé中1 9\n\n,.;:?!'\"()/%@$+=>-*_`[]#&<|~\\\t"
_RENDERERS = [telegram, slack]


def _chunk(mod: ModuleType, text: str, limit: int) -> Any:
    if mod is telegram:
        return telegram.chunk_markdown(text, limit=limit)
    return slack.chunk_mrkdwn(text, limit=limit)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(alphabet=_ALPHABET, max_size=80),
                 st.text(alphabet=_ALPHABET[:27], max_size=80)))  # shortcut's own characters
def test_the_shortcut_gives_what_the_parser_gives(text: str) -> None:
    # the shortcut and the parser meet in the neutral blocks every renderer writes from
    plain = render._plain_blocks(text)
    if plain is not None:
        assert plain == render._parsed_blocks(text)


@pytest.mark.parametrize("mod", _RENDERERS, ids=["telegram", "slack"])
@pytest.mark.parametrize("text", [
    "answer to: hello 0",
    "Hello, world! How are you?\n\nSecond paragraph (with 50% more) -> done.",
    "Line one\nline two, same paragraph\n\n\nA third one.",
    "Voilà: échec à 5%, see http://example.com/a?b=c",
])
def test_plain_answers_take_the_shortcut_and_chunk_as_before(
        mod: ModuleType, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert render.plain_paragraphs(text) is not None
    fast = _chunk(mod, text, 40)
    monkeypatch.setattr(render, "_plain_blocks", lambda _text: None)
    assert fast == _chunk(mod, text, 40)


@pytest.mark.parametrize("text", [
    "1. a list", "- a list", "# a heading", "> a quote", "    code", "a *b*", "a_b_c",
    "a `b`", "[a](http://x)", "a &amp; b", "a <http://x>", "a | b\n--|--", "a\n===",
    "a\n---", "trailing  ", "a\\*", "~~a~~", "```\na\n```",
])
def test_text_that_may_be_markdown_goes_to_the_parser(text: str) -> None:
    assert render.plain_paragraphs(text) is None
