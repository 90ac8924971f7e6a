"""Markdown cut anywhere, made whole: what a draft shown mid-answer needs to stay valid markup
on every platform (:mod:`bots.turn.stream`'s edits, :mod:`bots.turn.native`'s pages).

:func:`closed_markdown` closes what a cut leaves open (a code fence, bold, italics, an
inline code span); :func:`open_fence` and :func:`fence_opening` tell which code fence a cut
falls inside, so that the part after it opens the block again.
"""

from __future__ import annotations

import re

__all__ = ["closed_markdown", "fence_opening", "open_fence"]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.MULTILINE)
_PARTIAL_MARKER = re.compile(r"[*`~_]+\Z")


def closed_markdown(text: str) -> str:
    """``text`` cut anywhere, with what the cut left open closed: a code fence, then (outside
    code) an inline code span, bold and italics. The result parses as the same blocks the
    text will be once complete, as far as it goes."""
    # a marker still being written ("**" of "**bold", the "`" of a closing fence) means
    # nothing yet: shown once the next piece tells what it is
    text = _PARTIAL_MARKER.sub("", text)
    fence = open_fence(text)
    if fence is not None:
        return text + ("\n" if not text.endswith("\n") else "") + fence
    # outside code fences: the tail after the last fence is prose
    fences = list(_FENCE.finditer(text))
    last = 0
    if fences:
        eol = text.find("\n", fences[-1].end())
        last = len(text) if eol < 0 else eol + 1
    head, tail = text[:last], text[last:]
    # inline code spans first: markers inside them are literal
    if tail.count("`") % 2:
        return head + tail + "`"
    prose = re.sub(r"`[^`]*`", "", tail)
    closing = ""
    if prose.count("**") % 2:
        closing += "**"
    single = re.sub(r"\*\*", "", prose)
    if len(re.findall(r"(?<![\w*])\*(?=\S)|(?<=\S)\*(?![\w*])", single)) % 2:
        closing = "*" + closing
    if re.search(r"(?<!~)~~(?!~)", prose) and prose.count("~~") % 2:
        closing = "~~" + closing
    if closing and tail.rstrip() != tail:
        tail = tail.rstrip()  # "**bold " + "**" is no bold: close it on its last word
    return head + tail + closing


def open_fence(text: str) -> str | None:
    """The marker (```` ``` ````, ``~~~``) of the code fence ``text`` leaves open, if any."""
    opening = fence_opening(text)
    if opening is None:
        return None
    m = _FENCE.match(opening)
    return m.group(1) if m else None


def fence_opening(text: str) -> str | None:
    """The opening line (its language included) of the code fence ``text`` leaves open."""
    opened: re.Match[str] | None = None
    for m in _FENCE.finditer(text):
        mark = m.group(1)
        if opened is None:
            opened = m
        elif mark[0] == opened.group(1)[0] and len(mark) >= len(opened.group(1)):
            opened = None
    if opened is None:
        return None
    eol = text.find("\n", opened.start())
    return text[opened.start():eol if eol >= 0 else len(text)].strip()
