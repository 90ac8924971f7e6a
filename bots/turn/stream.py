"""The answer as it is written: the draft a streaming turn shows in its progress message.

:class:`AnswerDraft` collects a turn's text deltas between its tool rounds (the text of a
model call becomes part of the draft once that call answered; a retried call's partial text
is dropped, and so is a stop proposal the verifier refused), and gives the markdown the
progress message shows: its heartbeat line, then the text blocks with the tool lines
between them. :func:`closed_markdown` closes what a cut in mid-answer leaves open (a code
fence, bold, italics, an inline code span), so that every intermediate rendering is valid
markup on every platform; :func:`draft_chunk` renders it within one message (the latest
part, for a platform that previews a draft in one place); :func:`draft_pages` splits it
across messages as the final answer will be (the platform's own fence-aware splitter), and
:class:`DraftPages` shows those pages: the progress message first, then one new message
each time the draft outgrows the last, each recorded on the turn's outbox row before the
draft goes on (so the final answer, and a turn recovered after a crash, edit every one).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from bots.events import ReplyTarget
from bots.format import Chunk
from bots.port import DeliveryError, PlatformClient
from bots.progress import DraftStreamer
from bots.store.outbox import PLACEHOLDER, Outbox, OutboxRow
from geode.loop.events import (
    LoopEvent,
    ModelResponded,
    ModelRetrying,
    TextDelta,
    ToolProposed,
    ToolResulted,
    VerifyFailed,
)

__all__ = ["AnswerDraft", "DraftPages", "closed_markdown", "draft_chunk", "draft_pages"]

log = structlog.get_logger(__name__)

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


def draft_pages(head: str, body: str, render: Callable[[str], list[Chunk]]) -> list[Chunk]:
    """The draft as the messages it fills: ``head`` (the heartbeat line) and ``body`` in one
    message while they fit, else ``body`` split by the platform's renderer (fence-aware, the
    split the final answer gets: the pages before the last are already final when the
    answer is this text)."""
    whole = render(f"{head}\n\n{body}" if body else head)
    if len(whole) <= 1:
        return whole or [Chunk(formatted=head, fallback=head)]
    return render(body)


_SPARE = Chunk(formatted=PLACEHOLDER, fallback=PLACEHOLDER)


class DraftPages:
    """The messages a streamed draft fills: the turn's progress message, then the pages it
    added (recorded in the outbox row's ``message_ids``, the progress message first, before
    the draft goes on: the final answer edits them, and so does a recovered turn). A page
    is edited only when its part changed; a page the draft no longer fills (a refused
    answer, a retried call) shows ``…`` until the draft or the final answer fills it."""

    def __init__(self, *, client: PlatformClient, outbox: Outbox, row: OutboxRow) -> None:
        self.client = client
        self.outbox = outbox
        self.row = row
        #: pages after the progress message (a recovered turn's are its crashed run's),
        #: read from the row when the draft is first shown
        self.more: list[str] | None = None
        self._shown: dict[str, Chunk] = {}
        #: a page being sent and recorded: awaited by :meth:`settle` (its id must be on
        #: the row before the final answer is recorded, or the page would be left behind)
        self._adding: asyncio.Task[None] | None = None

    async def show(self, target: ReplyTarget, first: str, text: str,
                   draft: AnswerDraft | None) -> None:
        """Show the progress ``text`` or, once it has text, the ``draft`` under the
        heartbeat (``text``'s first line) from the message ``first`` (the progress
        message) on."""
        render = self.client.render
        pages = (draft_pages(text.split("\n", 1)[0], draft.markdown(), render)
                 if draft is not None and draft.has_text
                 else [self.client.render_progress(text)])
        if self.more is None:
            ids = list(self.row.message_ids)
            self.more = ids[1:] if ids and ids[0] == first else []
        ids = [first, *self.more]
        # the page being written goes the platform's draft way where it has one (Telegram:
        # a private chat's preview; a group's edit, skipped while its budget is spent)
        streamer = (self.client if isinstance(self.client, DraftStreamer)
                    and draft is not None and draft.has_text else None)
        try:
            for i, page in enumerate(pages):
                if i >= len(ids):
                    self._adding = asyncio.ensure_future(self._add(target, first, page))
                    await asyncio.shield(self._adding)
                    ids = [first, *(self.more or [])]
                elif self._shown.get(ids[i]) != page:
                    if streamer is not None and i == len(pages) - 1:
                        await streamer.stream_draft(target, ids[i], page)
                    else:
                        await self.client.edit(target, ids[i], page)
                    self._shown[ids[i]] = page
            for mid in ids[len(pages):]:
                if self._shown.get(mid) != _SPARE:
                    await self.client.edit(target, mid, _SPARE)
                    self._shown[mid] = _SPARE
        except DeliveryError as exc:  # the next due edit shows the draft again
            log.debug("progress.page_failed", error=str(exc))
        except Exception:  # an indicator never fails the turn
            log.debug("progress.page_failed", exc_info=True)

    async def _add(self, target: ReplyTarget, first: str, page: Chunk) -> None:
        mid = await self.client.send(target, page)
        more = self.more = [*(self.more or []), mid]
        self._shown[mid] = page
        # recorded before the draft goes on: the final answer and a recovered turn edit it
        await self.outbox.update(self.row.id, message_ids=[first, *more])

    async def settle(self) -> None:
        """Wait for a page on its way to be recorded (the reporter closes)."""
        if self._adding is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._adding)
