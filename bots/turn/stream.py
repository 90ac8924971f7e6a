"""The answer as it is written: the draft a streaming turn shows in its progress message.

:class:`AnswerDraft` collects a turn's text deltas between its tool rounds (the text of a
model call becomes part of the draft once that call answered; a retried call's partial text
is dropped, and so is a stop proposal the verifier refused), and gives the markdown the
progress message shows: its heartbeat line, then the text blocks with the tool lines
between them. :func:`closed_markdown` closes what a cut in mid-answer leaves open (a code
fence, bold, italics, an inline code span), so that every intermediate rendering is valid
markup on every platform; :func:`draft_chunk` renders it within one message (the latest
part when the draft outgrew the platform's limit: the final answer is split, at
fence-aware boundaries, when it is delivered).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from bots.format import Chunk
from geode.loop.events import (
    LoopEvent,
    ModelResponded,
    ModelRetrying,
    TextDelta,
    ToolProposed,
    ToolResulted,
    VerifyFailed,
)

__all__ = ["AnswerDraft", "closed_markdown", "draft_chunk"]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.MULTILINE)
_PARTIAL_MARKER = re.compile(r"[*`~_]+\Z")
#: a tool line's outcome, as the progress message shows it
_MARKS = {"ok": "✓", "denied": "⛔ denied", "error": "✗"}


@dataclass(kw_only=True)
class AnswerDraft:
    """One turn's streamed text, block by block (text, and tool lines between them)."""

    #: committed blocks: ("text", markdown) or ("tool", line)
    blocks: list[tuple[str, str]] = field(default_factory=list)
    #: the running model call's text so far (committed when the call answers)
    pending: str = ""

    @property
    def has_text(self) -> bool:
        return bool(self.pending.strip()) or any(
            kind == "text" and body.strip() for kind, body in self.blocks)

    def follow(self, event: LoopEvent) -> bool:
        """The draft follows the turn's events; True: only the draft changed (the message
        is due an edit), False: the progress reporter handles the event as well."""
        match event:
            case TextDelta(text=text):
                self.delta(text)
                return True
            case VerifyFailed():
                shown = self.has_text
                self.refused()  # the repair replaces it
                return shown
            case ModelRetrying():
                self.retried()  # the partial text comes again
            case ModelResponded():
                self.responded()
            case ToolProposed(name=name):
                self.tool(f"🔧 {name}")
            case ToolResulted(name=name, status=status):
                self.tool_done(f"🔧 {name}", f"🔧 {name} {_MARKS.get(status, status)}")
        return False

    def delta(self, text: str) -> None:
        self.pending += text

    def responded(self) -> None:
        """The model call answered: its text is part of the draft."""
        if self.pending.strip():
            self.blocks.append(("text", self.pending))
        self.pending = ""

    def retried(self) -> None:
        """The model call is tried again: what it streamed so far will come again."""
        self.pending = ""

    def refused(self) -> None:
        """The verifier refused the stop proposal (the last text block): a repair follows."""
        self.pending = ""
        for i in range(len(self.blocks) - 1, -1, -1):
            if self.blocks[i][0] == "text":
                del self.blocks[i]
                break

    def tool(self, line: str) -> None:
        self.responded()
        self.blocks.append(("tool", line))

    def tool_done(self, line: str, done: str) -> None:
        for i in range(len(self.blocks) - 1, -1, -1):
            if self.blocks[i] == ("tool", line):
                self.blocks[i] = ("tool", done)
                return

    def markdown(self) -> str:
        """The draft's body, each text block closed on its own."""
        parts: list[str] = []
        bodies = [*self.blocks, *([("text", self.pending)] if self.pending.strip() else [])]
        for kind, body in bodies:
            if kind == "tool":
                parts.append(f"`{body}`" if "`" not in body else body)
            else:
                parts.append(closed_markdown(body.strip("\n")))
        return "\n\n".join(p for p in parts if p)


def closed_markdown(text: str) -> str:
    """``text`` cut anywhere, with what the cut left open closed: a code fence, then (outside
    code) an inline code span, bold and italics. The result parses as the same blocks the
    text will be once complete, as far as it goes."""
    # a marker still being written ("**" of "**bold", the "`" of a closing fence) means
    # nothing yet: shown once the next piece tells what it is
    text = _PARTIAL_MARKER.sub("", text)
    open_fence = _open_fence(text)
    if open_fence is not None:
        return text + ("\n" if not text.endswith("\n") else "") + open_fence
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


def _open_fence(text: str) -> str | None:
    """The fence marker ``text`` leaves open, if any."""
    open_fence: str | None = None
    for m in _FENCE.finditer(text):
        mark = m.group(1)
        if open_fence is None:
            open_fence = mark
        elif mark[0] == open_fence[0] and len(mark) >= len(open_fence):
            open_fence = None
    return open_fence


def draft_chunk(head: str, body: str, render: Callable[[str], list[Chunk]]) -> Chunk:
    """The draft as one message: the platform's rendering of ``head`` and ``body``, or,
    when that outgrew the platform's limit, of ``head`` and the latest paragraphs of
    ``body`` that fit (a code block cut at its start is opened again)."""
    chunks = render(f"{head}\n\n{body}" if body else head)
    if len(chunks) <= 1:
        return chunks[0] if chunks else Chunk(formatted=head, fallback=head)
    paras = body.split("\n\n")

    def tail_from(i: int) -> list[Chunk]:
        fence = _open_fence("\n\n".join(paras[:i]))
        tail = "\n\n".join(paras[i:])
        return render(f"{head}\n\n…\n\n" + (f"{fence}\n" if fence else "") + tail)

    lo, hi, best = 1, len(paras) - 1, None
    while lo <= hi:  # the most paragraphs that still fit one message
        mid = (lo + hi) // 2
        got = tail_from(mid)
        if len(got) == 1:
            best, hi = got[0], mid - 1
        else:
            lo = mid + 1
    return best if best is not None else chunks[-1]
