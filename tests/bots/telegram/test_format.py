"""Markdown -> Telegram HTML, fence-aware chunking, and the plain-text fallback."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bots.render import utf16_len
from bots.telegram.format import chunk_markdown, markdown_to_telegram_html
from bots.testing._telegram_html import parse_telegram_html
from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import CHAT, finals


def _balanced(html: str) -> bool:
    """Every tag closed in order (what Telegram's parser needs) and accepted by the fake."""
    stack: list[str] = []
    for m in re.finditer(r"<(/?)([a-z-]+)[^>]*>", html):
        closing, tag = m.group(1) == "/", m.group(2)
        if not closing:
            stack.append(tag)
        elif not stack or stack.pop() != tag:
            return False
    if stack:
        return False
    parse_telegram_html(html)  # raises on anything Telegram would reject
    return True


def test_markdown_becomes_telegram_html() -> None:
    md = ("# Title\n\nSome **bold**, *italic*, ~~gone~~, `x < y && z`, and "
          "[a link](https://example.org/?a=1&b=2).\n\n- one\n- two\n\n> quoted\n\n"
          "```python\nif a < b:\n    print('<tag>')\n```\n\n| k | v |\n|---|---|\n| a | 1 |\n")
    html = markdown_to_telegram_html(md)
    assert "<b>Title</b>" in html
    assert "<b>bold</b>" in html and "<i>italic</i>" in html and "<s>gone</s>" in html
    assert "<code>x &lt; y &amp;&amp; z</code>" in html
    assert '<a href="https://example.org/?a=1&amp;b=2">a link</a>' in html
    assert "• one\n• two" in html
    assert "<blockquote>quoted</blockquote>" in html
    assert ('<pre><code class="language-python">if a &lt; b:\n    print(\'&lt;tag&gt;\')'
            "</code></pre>") in html
    assert "<pre>k  v\na  1</pre>" in html
    plain, entities = parse_telegram_html(html)
    assert "print('<tag>')" in plain
    assert {e["type"] for e in entities} >= {"bold", "italic", "strikethrough", "code",
                                             "text_link", "pre", "blockquote"}


def test_unsafe_links_and_raw_html_are_not_passed_through() -> None:
    html = markdown_to_telegram_html('[x](javascript:alert(1)) <b onclick="y">raw</b>')
    assert "<a " not in html and "alert(1)" in html  # kept as text, never as a link
    assert "<b onclick" not in html and "&lt;b onclick" in html
    assert _balanced(html)


def test_long_code_fences_are_split_into_closed_blocks_within_the_limit() -> None:
    code = "\n".join(f"line {i} <&> " + "x" * (i % 50) for i in range(600))
    md = f"Intro paragraph.\n\n```sh\n{code}\n```\n\nMiddle text.\n\n```\n{code[:3000]}\n```\nEnd."
    chunks = chunk_markdown(md, limit=4096)
    assert len(chunks) > 5
    for c in chunks:
        assert utf16_len(c.formatted) <= 4096
        assert _balanced(c.formatted)
        assert c.formatted.count("<pre>") == c.formatted.count("</pre>")
        assert c.fallback.count("```") % 2 == 0  # the plain twin's fences are balanced too
    # nothing lost: every code line appears exactly once across the chunks
    joined = "".join(parse_telegram_html(c.formatted)[0] for c in chunks)
    for i in (0, 299, 599):
        assert joined.count(f"line {i} <&> ") == 1 + (i < 100 and code[:3000].count(
            f"line {i} <&> ") > 0)
    assert joined.startswith("Intro paragraph.") and joined.rstrip().endswith("End.")


def test_a_single_enormous_line_and_astral_characters_respect_utf16_limits() -> None:
    md = "```\n" + "😀" * 5000 + "\n```\n\n" + "𝔘" * 9000
    chunks = chunk_markdown(md, limit=4096)
    for c in chunks:
        assert utf16_len(c.formatted) <= 4096 and _balanced(c.formatted)
    total = "".join(parse_telegram_html(c.formatted)[0] for c in chunks)
    assert total.count("😀") == 5000 and total.count("𝔘") == 9000


@pytest.mark.parametrize("lang", ["", "py", "javascript", "objective-c++-and-more"])
def test_a_long_code_block_fits_whatever_its_language(lang: str) -> None:
    # The split budget was a fixed 40 characters of markup; "py" alone needs 44.
    code = "\n".join(f"x = {i};" for i in range(2000))
    chunks = chunk_markdown(f"```{lang}\n{code}\n```", limit=4096)
    assert all(utf16_len(c.formatted) <= 4096 and _balanced(c.formatted) for c in chunks)
    shown = "\n".join(parse_telegram_html(c.formatted)[0] for c in chunks)
    assert shown.split("\n") == code.split("\n")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.text(max_size=300),
    st.builds(lambda lang, body: f"```{lang}\n{body}\n```", st.sampled_from(["", "py", "x"]),
              st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=900)),
    st.builds(lambda t: f"**{t}** `{t}` *{t}*", st.text(max_size=50)),
), max_size=12), st.sampled_from([200, 1000, 4096]))
def test_chunking_property(parts: list[str], limit: int) -> None:
    for c in chunk_markdown("\n\n".join(parts), limit=limit):
        assert utf16_len(c.formatted) <= limit
        assert _balanced(c.formatted)
        assert c.fallback.strip() or c.formatted.strip()


async def test_the_fake_accepts_every_chunk_of_a_long_formatted_answer(make_stack, fake):
    code = "\n".join(f"echo {i} '<ok>' && true" for i in range(400))
    answer = f"## Plan\n\nRun **this**:\n\n```bash\n{code}\n```\n\nDone: `{len(code)}` chars."
    stack = make_stack(provider=ScriptedProvider([answer], repeat_last=True))
    await stack.start()
    fake.user_says(CHAT, "@geode_bot long one", from_user=42)
    await fake.wait_until(lambda: any("Done:" in m.plain_text
                                      for m in fake.messages_in(CHAT, from_bot=True)), within=15)
    visible = fake.messages_in(CHAT, from_bot=True)
    assert len(visible) >= 3
    assert all(m.parse_mode == "HTML" for m in visible)
    assert not [c for c in fake.calls if c.status >= 400]  # Telegram accepted all markup
    text = "\n".join(m.plain_text for m in visible)
    assert text.count("echo 0 '<ok>'") == 1 and text.count("echo 399 '<ok>'") == 1


async def test_markup_rejected_by_telegram_falls_back_to_plain_text(make_stack, fake):
    stack = make_stack(provider=ScriptedProvider(["**Bold** answer with `code`"],
                                                 repeat_last=True))
    await stack.start()
    fake.fail_next("editMessageText", status=400,
                   description="Bad Request: can't parse entities: unsupported start tag")
    fake.user_says(CHAT, "@geode_bot format me", from_user=42)
    await fake.wait_until(lambda: finals(fake, "Bold answer with code"), within=10)
    final = finals(fake, "Bold answer with code")
    assert len(final) == 1 and final[0].parse_mode is None  # sent as plain text
    rejected = [c for c in fake.calls_to("editMessageText") if c.status == 400]
    assert len(rejected) == 1 and rejected[0].params.get("parse_mode") == "HTML"

    # a notice (/help) goes through sendMessage: same fallback
    fake.fail_next("sendMessage", status=400,
                   description="Bad Request: can't parse entities: bad tag")
    fake.user_says(CHAT, "/help", from_user=42)
    await fake.wait_until(lambda: any("/status" in s.plain_text for s in fake.sent),
                          within=10)
    helps = [s for s in fake.sent if "/status" in s.plain_text]
    assert len(helps) == 1 and helps[0].parse_mode is None
