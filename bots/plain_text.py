"""Answers without Markdown: most short replies are plain sentences, and each renderer
(Telegram HTML, Slack mrkdwn) gives such a text's paragraphs back as they are, escaped. This
finds them without the parser; any text it is not sure of goes to the parser as before."""

from __future__ import annotations

import re

__all__ = ["plain_paragraphs"]

#: A line Markdown leaves as it is: it starts with a letter (no list, heading, quote, fence,
#: indented code or setext/table marker) and holds only letters, digits, spaces and
#: punctuation without a meaning inline (no emphasis, code, link, escape, entity, autolink,
#: table pipe) and no trailing space (a hard break).
_PLAIN_LINE = re.compile(
    r"(?:[^\W\d_][^\W_]*"  # a letter first, then letters and digits
    r"(?:[ ,.;:?!'\"()/%@$+=>-]+[^\W_]+)*"  # runs of spaces/punctuation between words
    r"[,.;:?!'\")/%@$+=>-]*)?"  # punctuation at the end (no space)
)


def plain_paragraphs(markdown: str) -> list[str] | None:
    """The paragraphs of a text without Markdown, as CommonMark parses them (lines of one
    paragraph joined by a newline); None when any line may mean something."""
    lines = markdown.split("\n")
    if not all(_PLAIN_LINE.fullmatch(line) for line in lines):
        return None
    out: list[str] = []
    para: list[str] = []
    for line in [*lines, ""]:
        if line:
            para.append(line)
        elif para:
            out.append("\n".join(para))
            para = []
    return out
