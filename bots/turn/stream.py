"""The answer as it is written: the draft a streaming turn shows in its progress message.

:class:`AnswerStream` is the one collaborator the turn's progress reporter talks to (follow
the events, show the draft, settle): it holds the draft and shows it the way chosen once for
the turn, Slack's native streams (:class:`bots.turn.native.NativePages`) or the paced edits
below, which also take over the native pages when their streams end.

:class:`AnswerDraft` collects a turn's text deltas between its tool rounds (the text of a
model call becomes part of the draft once that call answered; a retried call's partial text
is dropped, and so is a stop proposal the verifier refused), and gives the markdown the
progress message shows: its heartbeat line, then the text blocks with the tool lines
between them. :func:`closed_markdown` (:mod:`bots.turn.markup`) closes what a cut in
mid-answer leaves open (a code fence, bold, italics, an inline code span), so that every
intermediate rendering is valid markup on every platform; :func:`draft_chunk` renders it
within one message (the latest part, for a platform that previews a draft in one place);
:func:`draft_pages` splits it across messages as the final answer will be (the platform's
own fence-aware splitter), and
:class:`DraftPages` shows those pages: the progress message first, then one new message
each time the draft outgrows the last, each recorded on the turn's outbox row before the
draft goes on (so the final answer, and a turn recovered after a crash, edit every one).

A draft is masked as the final answer is (:func:`geode.secret_redaction.redact_text`), and
the text still being written stops where a secret no mask matches yet may begin
(:func:`geode.secret_redaction.held_from`: a last word with digits or ``-_:=+`` or a
registered secret's first characters, a ``Bearer`` and what follows it, a registered
passphrase's first words), so no part of a secret is ever on screen before it is masked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from bots.events import ReplyTarget
from bots.format import Chunk
from bots.port import DeliveryError, NativeStream, PlatformClient
from bots.progress import DraftStreamer
from bots.store.outbox import PLACEHOLDER, Outbox, OutboxRow
from bots.turn.markup import closed_markdown, open_fence
from bots.turn.native import NativePages
from geode.loop.events import (
    LoopEvent,
    ModelResponded,
    ModelRetrying,
    TextDelta,
    ToolProposed,
    ToolResulted,
    VerifyFailed,
)
from geode.secret_redaction import held_from, redact_text

__all__ = [
    "AnswerDraft",
    "AnswerStream",
    "DraftPages",
    "closed_markdown",
    "draft_chunk",
    "draft_pages",
]

log = structlog.get_logger(__name__)

#: a tool line's outcome, as the progress message shows it
_MARKS = {"ok": "✓", "denied": "⛔ denied", "error": "✗"}


@dataclass(kw_only=True)
class AnswerDraft:
    """One turn's streamed text, block by block (text, and tool lines between them)."""

    #: committed blocks: ("text", markdown), ("run", line) of a tool running, ("tool", line)
    #: of one with its outcome
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
        self.blocks.append(("run", line))

    def tool_done(self, line: str, done: str) -> None:
        for i in range(len(self.blocks) - 1, -1, -1):
            if self.blocks[i] == ("run", line):
                self.blocks[i] = ("tool", done)
                return

    def streamable(self) -> str:
        """The draft as a stream shows it, which only appends: its text blocks as written
        and its tool lines between them, up to the first tool still running (its line goes
        out with its outcome, which a stream could not add later) unless the model already
        wrote on after it. It only grows while the draft is not refused or retried."""
        parts: list[str] = []
        blocks = self._shown()
        for i, (kind, body) in enumerate(blocks):
            if kind == "run" and not any(k == "text" for k, _ in blocks[i + 1:]):
                break
            parts.append(body.strip("\n") if kind == "text" else _tool_markdown(body))
        return "\n\n".join(parts)

    def markdown(self) -> str:
        """The draft's body, each text block closed on its own."""
        parts: list[str] = []
        for kind, body in self._shown():
            if kind == "text":
                parts.append(closed_markdown(body.strip("\n")))
            else:
                parts.append(_tool_markdown(body))
        return "\n\n".join(p for p in parts if p)

    def _shown(self) -> list[tuple[str, str]]:
        """The blocks as a draft may show them: text masked, and of the text still being
        written only its whole words (module docstring)."""
        shown = [(kind, redact_text(body)) if kind == "text" else (kind, body)
                 for kind, body in self.blocks]
        writing = self.pending
        held = held_from(writing)
        if held < len(writing):
            writing = writing[:held].rstrip()
        writing = redact_text(writing)
        if writing.strip():
            shown.append(("text", writing))
        return shown


def _tool_markdown(line: str) -> str:
    """A tool line as the draft shows it (code, so that a tool's name is never markup)."""
    return f"`{line}`" if "`" not in line else line


def draft_chunk(head: str, body: str, render: Callable[[str], list[Chunk]]) -> Chunk:
    """The draft as one message: the platform's rendering of ``head`` and ``body``, or,
    when that outgrew the platform's limit, of ``head`` and the latest paragraphs of
    ``body`` that fit (a code block cut at its start is opened again)."""
    chunks = render(f"{head}\n\n{body}" if body else head)
    if len(chunks) <= 1:
        return chunks[0] if chunks else Chunk(formatted=head, fallback=head)
    paras = body.split("\n\n")

    def tail_from(i: int) -> list[Chunk]:
        fence = open_fence("\n\n".join(paras[:i]))
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


class AnswerStream:
    """One streaming turn's answer as it is written, and the thread showing it: the one
    collaborator the progress reporter (:class:`bots.turn.run.ProgressReporter`) talks to.

    It follows the turn's events into its :class:`AnswerDraft` (text, tool lines, a draft
    the verifier refused or a retried call dropped) and shows the draft from the progress
    message on, the way chosen once for the turn: in the platform's own streaming messages
    where the client offers :class:`~bots.port.NativeStream`
    (:class:`~bots.turn.native.NativePages`), else by paced edits of :class:`DraftPages`,
    which also take over the native pages when their streams end. Either way the draft
    goes on in new messages at the platform's limit, each recorded on the turn's outbox row
    before the draft goes on, and the final answer replaces every page."""

    def __init__(self, *, client: PlatformClient, outbox: Outbox, row: OutboxRow,
                 target: ReplyTarget) -> None:
        self.client = client
        self.target = target
        self.draft = AnswerDraft()
        self.pages = DraftPages(client=client, outbox=outbox, row=row)
        self.native = (NativePages(client=client, edit=client, outbox=outbox, row=row,
                                   target=target, fits=self._fits)
                       if isinstance(client, NativeStream) else None)

    def follow(self, event: LoopEvent) -> bool:
        """The draft follows the turn's event; True: only the draft changed (an edit is
        due), False: the progress reporter handles the event as well."""
        return self.draft.follow(event)

    @property
    def has_text(self) -> bool:
        return self.draft.has_text

    def chunk(self, text: str) -> Chunk | None:
        """The draft within one message under ``text``'s heartbeat line (a progress message
        sent late shows it at once); None while it has no text."""
        if not self.draft.has_text:
            return None
        return draft_chunk(text.split("\n", 1)[0], self.draft.markdown(), self.client.render)

    async def show(self, message_id: str, text: str, *, queued: bool = False) -> str:
        """Show the progress ``text`` or, once the draft has text (and the turn is not
        queued), the draft under its heartbeat line, from the progress message
        ``message_id`` on; returns the progress message's id from now on (a native stream
        takes its place). Never raises a platform error."""
        draft = None if queued else self.draft
        native = self.native
        if native is not None and not native.ended:
            if draft is not None and draft.has_text:
                head = text.split("\n", 1)[0]
                shown = await native.show(
                    message_id, draft.streamable(),
                    lambda: draft_chunk(head, self.draft.markdown(), self.client.render))
                if shown:
                    return native.message_id or message_id
            elif native.pages:
                native.ended = True  # nothing to stream (a refused draft): edits from now
            if native.ended and native.pages:
                # its streams become pages edited at the reporter's pace (an edit ends a
                # stream still open), the progress message first
                self.pages.more = native.pages[1:]
            message_id = native.message_id or message_id
        await self.pages.show(self.target, message_id, text, draft)
        return message_id

    async def settle(self) -> None:
        """Wait for a page on its way to be recorded (the reporter closes: its id must be on
        the row before the final answer is recorded, or the page would be left behind)."""
        if self.native is not None:
            await self.native.settle()
        await self.pages.settle()

    def _fits(self, markdown: str) -> bool:
        return len(self.client.render(markdown)) <= 1
