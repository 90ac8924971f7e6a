"""Markdown -> Slack mrkdwn: formatting, escaping (no pings, no forged links), chunking."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from bots.slack import chunk_mrkdwn, markdown_to_mrkdwn


def test_inline_and_block_formatting():
    md = ("# Title\n\n**bold** *it* ~~gone~~ `**raw**` [docs](https://x.io/a?b=1&c=2)\n\n"
          "> quoted **b**\n\n- a\n  - nested\n- c\n\n1. one\n2. two\n\n---")
    assert markdown_to_mrkdwn(md) == (
        "*Title*\n\n*bold* _it_ ~gone~ `**raw**` <https://x.io/a?b=1&amp;c=2|docs>\n\n"
        "> quoted *b*\n\n• a\n    • nested\n• c\n\n1. one\n2. two\n\n———"
    )


def test_arithmetic_and_identifiers_are_left_alone():
    assert markdown_to_mrkdwn("a * b * c and snake_case_name and 2 * 3 * 4") == \
        "a * b * c and snake_case_name and 2 * 3 * 4"


def test_code_blocks_drop_the_language_and_keep_content_verbatim_but_escaped():
    out = markdown_to_mrkdwn("```python\nif a < b and c > d: x = **y** & z\n```")
    assert out == "```\nif a &lt; b and c &gt; d: x = **y** &amp; z\n```"


def test_the_model_cannot_ping_or_forge_links():
    out = markdown_to_mrkdwn("<!channel> hey <!here> <@U123> <https://evil|click> "
                             "[x](javascript:alert(1))")
    assert "<!" not in out and "<@" not in out and "|click>" not in out
    # an autolink stays a link whose visible label is its real target
    assert "<https://evil%7Cclick|https://evil¦click>" in out
    assert "&lt;!channel&gt;" in out


def test_table_becomes_a_code_grid():
    out = markdown_to_mrkdwn("| a | bb |\n|---|---|\n| 1 | 2 |")
    assert out == "```\na  bb\n1  2\n```"


def test_long_code_block_is_split_into_closed_fences():
    code = "\n".join(f"row {i} <x> & y" for i in range(1000))
    chunks = chunk_mrkdwn(f"intro\n\n```\n{code}\n```\n\noutro", limit=3900)
    assert len(chunks) > 3
    for c in chunks:
        assert len(c.formatted) <= 3900
        assert c.formatted.count("```") % 2 == 0
    joined = "\n".join(c.formatted for c in chunks)
    assert all(f"row {i} &lt;x&gt; &amp; y" in joined for i in range(1000))
    assert chunks[0].formatted.startswith("intro") and chunks[-1].formatted.endswith("outro")


def test_one_enormous_line_and_prose_are_cut_within_the_limit():
    for md in ("```\n" + "&" * 20000 + "\n```", "word " * 5000, "&" * 9000):
        chunks = chunk_mrkdwn(md, limit=1000)
        assert all(len(c.formatted) <= 1000 for c in chunks)
        assert all(c.formatted.count("```") % 2 == 0 for c in chunks)
        # entities are never cut in half
        assert all(not re.search(r"&[a-z]{0,3}$", c.formatted) for c in chunks)


def test_empty_answer_is_still_a_message():
    assert chunk_mrkdwn("")[0].formatted == "(empty answer)"
    assert chunk_mrkdwn("   \n")[0].formatted == "(empty answer)"


def test_literal_backtick_runs_cannot_open_a_code_block():
    # ":```" is an unclosed code span in Markdown (plain text); left as is, it would pair
    # with the next ``` of the message and turn what lies between into code.
    out = markdown_to_mrkdwn("a ```\n\n*not code*\n\nb ```")
    assert "```" not in out
    assert "_not code_" in out  # still formatted as text
    # inside code spans too: a span of backticks, and one that starts with one
    for md in ("```` ``` ````", "`` ` ``", "`` `x ``"):
        [chunk] = chunk_mrkdwn(md, limit=60)
        assert "```" not in chunk.formatted, md
    assert markdown_to_mrkdwn("`plain`") == "`plain`"


@settings(max_examples=60, deadline=None, database=None)
@given(st.text(alphabet=st.sampled_from("ab *_~`#>-|[]()<>&!@\n:/"), max_size=600),
       st.integers(min_value=60, max_value=400))
def test_any_markdown_gives_bounded_balanced_safe_chunks(md, limit):
    for c in chunk_mrkdwn(md, limit=limit):
        assert 0 < len(c.formatted) <= limit
        assert c.formatted.count("```") % 2 == 0
        assert "<!" not in c.formatted and "<@" not in c.formatted


def _yaml_list(text: str, key: str) -> set[str]:
    """The ``- item`` lines right under ``key:`` (PyYAML is not a dependency)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip() == f"{key}:")
    items: set[str] = set()
    for ln in lines[start + 1:]:
        if ln.strip().startswith("#"):
            continue
        if not ln.strip().startswith("- "):
            break
        items.add(ln.strip()[2:].split("#")[0].strip())
    return items


def test_manifest_grants_exactly_the_scopes_and_events_used():
    from pathlib import Path

    from bots.slack.connector import EVENTS, SCOPES

    text = (Path(__file__).parents[3] / "deploy" / "slack-manifest.yaml").read_text()
    assert _yaml_list(text, "bot") == SCOPES
    assert _yaml_list(text, "bot_events") == EVENTS
    assert "- command: /geode" in text
    # the approval buttons need interactivity (clicks come to the events endpoint)
    lines = [ln.strip() for ln in text.splitlines() if not ln.strip().startswith("#")]
    assert lines[lines.index("interactivity:") + 1] == "is_enabled: true"
