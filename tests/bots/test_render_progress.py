"""Progress text is rendered in each platform's own markup (it used to be HTML-escaped on
every platform, so Discord showed ``&lt;`` and ``&amp;`` literally)."""

from __future__ import annotations

from bots.discord.format import render_progress as discord_progress
from bots.slack import render_progress as slack_progress
from bots.telegram.format import render_progress as telegram_progress

LINE = "🔧 a<b> & __init__ ✓"


def test_telegram_escapes_html() -> None:
    chunk = telegram_progress(LINE)
    assert chunk.formatted == "🔧 a&lt;b&gt; &amp; __init__ ✓"
    assert chunk.fallback == LINE


def test_slack_escapes_its_three_control_characters() -> None:
    chunk = slack_progress(LINE)
    assert chunk.formatted == "🔧 a&lt;b&gt; &amp; __init__ ✓"


def test_discord_keeps_the_text_and_escapes_markdown() -> None:
    chunk = discord_progress(LINE)
    assert "&lt;" not in chunk.formatted and "&amp;" not in chunk.formatted
    assert "a<b> & " in chunk.formatted
    assert r"\_\_init\_\_" in chunk.formatted  # not bold
    assert chunk.fallback == LINE
