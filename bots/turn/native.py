"""A streaming turn's draft in the platform's own streaming messages (Slack's chat streaming),
where the client offers :class:`~bots.port.NativeStream`: one implementation behind
:class:`bots.turn.stream.AnswerStream` (the paced edits of
:class:`~bots.turn.stream.DraftPages` are the other, and this one's fallback).

The first stream takes the progress message's place, and is recorded as the turn's progress
message before anything is appended to it, so the final answer (an ordinary edit) and a turn
recovered after a crash find it like any placeholder. The swap, in an order that leaves the
thread one message to edit at every crash point:

1. the progress message is deleted (a crash here: the row names a message that is gone; the
   answer is then sent as a new message, ``bots.turn.deliver``);
2. the row's progress message is cleared and its intent to send one recorded (the state a
   progress message has before its send);
3. the stream starts with the progress line (``⏳ Working…``) and the draft so far (a crash
   here: the recovered turn finds the unrecorded ``⏳`` message in the thread and reuses it,
   as it finds a placeholder whose id a crash hid);
4. its id is recorded (durably) and the draft grows by appends.

A stream only appends: it carries the draft as :meth:`~bots.turn.stream.AnswerDraft.streamable`
gives it, the text blocks with the tool lines between them (a tool's line once its outcome is
known). At the platform's limit (the part no longer renders as one message) the page is cut
at the last paragraph break that fits (a code block open at the cut is closed there and
opened again on the next page), its stream stopped, and the draft goes on in a new stream,
recorded on the turn's outbox row (``message_ids``, the progress message first) before
anything is appended to it: the final answer edits every page, and so does a turn recovered
after a crash. When the draft stops being an extension of what was streamed (a draft the
verifier refused, a model call retried), the platform refuses a stream, or a recovered turn
finds its crashed run's pages (this process cannot append to those streams), the streams
end and every page is edited on at the reporter's pace; the final answer replaces them.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable

import structlog

from bots.events import ReplyTarget
from bots.format import Chunk
from bots.port import DeliveryError, NativeStream, PlatformClient
from bots.progress import WORKING
from bots.store import Outbox, OutboxRow
from bots.turn.markup import fence_opening, open_fence

__all__ = ["MAX_STREAM_CHARS", "NativePages"]

log = structlog.get_logger(__name__)

#: the most one page carries (Slack takes 12,000 characters a call); the platform's message
#: limit (what :attr:`NativePages.fits` says) is usually smaller
MAX_STREAM_CHARS = 12_000
#: where a page may end, best first: a paragraph break, a line break, a space
_BREAKS = (re.compile(r"\n\n"), re.compile(r"\n"), re.compile(r" "))


class NativePages:
    """One turn's draft in native streams, one page each (see the module docstring)."""

    def __init__(self, *, client: NativeStream, edit: PlatformClient, outbox: Outbox,
                 row: OutboxRow, target: ReplyTarget, fits: Callable[[str], bool]) -> None:
        """``fits(markdown)``: whether a page's markdown is within one platform message."""
        self.client = client
        self._edit = edit
        self.outbox = outbox
        self.row = row
        self.target = target
        self.fits = fits
        #: the stream messages, the first one the turn's progress message
        self.pages: list[str] = []
        #: the progress message's id once this draft changed it (the swap, a refusal's
        #: placeholder); None: the reporter's still
        self.message_id: str | None = None
        #: no (more) streaming: the pages are edited from now on. A recovered turn's crashed
        #: run left pages this process cannot append to: edited from the start
        self.ended = len(row.message_ids) > 1
        #: the draft's text the streams carry so far (pages and cuts included)
        self.streamed = ""
        #: where the current page's part of the text starts, and what it shows before it
        #: (the progress line on the first page, a code block opened again on later ones)
        self._base = 0
        self._lead = f"{WORKING}\n\n"
        #: the swap, an append or a spill on its way: it runs to its end even when the
        #: reporter closes meanwhile (a started stream must be recorded before the answer)
        self._busy: asyncio.Future[bool] | None = None

    async def show(self, message_id: str, text: str, placeholder: Callable[[], Chunk]) -> bool:
        """Stream ``text`` (the draft as a stream shows it) from the progress message
        ``message_id`` on; False: it cannot (refused or retried, not here, a recovered
        turn's pages): the caller edits the pages (:attr:`pages`, the progress message
        :attr:`message_id` when set) from now on. ``placeholder()``: a progress message to
        send again where the platform refused the stream after the swap deleted the first.
        Never raises a platform error: a failing indicator never fails the turn."""
        if self.ended:
            return False
        busy = self._busy = asyncio.ensure_future(self._show(message_id, text, placeholder))
        try:
            return await asyncio.shield(busy)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await busy
            raise

    async def settle(self) -> None:
        """Wait for a stream on its way to be recorded (the reporter closes)."""
        if self._busy is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._busy)

    async def _show(self, message_id: str, text: str, placeholder: Callable[[], Chunk]) -> bool:
        try:
            if not self.pages:
                if not self.client.can_stream(self.target):
                    self.ended = True
                    return False
                return await self._start(message_id, text, placeholder)
            if not text.startswith(self.streamed):
                # refused or retried: a stream takes nothing back
                self.ended = True
                return False
            return await self._grow(text)
        except DeliveryError as exc:  # skipped (paced, a hiccup): the next show catches up
            log.debug("native_stream.failed", error=str(exc))
        except Exception:
            log.warning("native_stream.failed", exc_info=True)
        return True

    async def _start(self, placeholder: str, text: str,
                     make_placeholder: Callable[[], Chunk]) -> bool:
        """The swap (module docstring), then the draft so far."""
        try:
            await self.client.delete_message(self.target, placeholder)
        except DeliveryError as exc:
            log.info("native_stream.placeholder_kept", error=str(exc))
            self.ended = True
            return False
        await self.outbox.update(self.row.id, progress_message_id=None, progress_state="sending")
        cut = self._cut(text)
        try:
            mid = await self.client.start_stream(self.target, self._lead + text[:cut])
        except DeliveryError as exc:
            # not here (the client remembers the channel): a placeholder again, as the
            # reporter sends one, and edits from now on
            log.info("native_stream.refused", error=str(exc))
            self.ended = True
            self.message_id = await self._edit.send(self.target, make_placeholder())
            await self._record()
            return False
        self.pages, self.message_id, self.streamed = [mid], mid, text[:cut]
        await self._record()
        return await self._grow(text)

    async def _grow(self, text: str) -> bool:
        """``text`` past what was streamed appended to the current page, and to new pages
        past the platform's limit; False: a new page could not stream (edits from now)."""
        while len(self.streamed) < len(text):
            cut = self._cut(text)
            if cut > len(self.streamed):
                if not await self._append(text[len(self.streamed):cut]):
                    self.ended = True
                    return False
                self.streamed = text[:cut]
            if cut >= len(text) or not text[cut:].strip():
                break  # nothing but a space past the page: it waits for the next words
            if not await self._spill(text, cut):
                self.ended = True
                return False
        return True

    async def _append(self, markdown: str) -> bool:
        """False: the stream ended at the platform (stopped by an edit, expired after a
        silence). A paced or failed append raises (skipped; the next one carries it)."""
        try:
            await self.client.append_stream(self.target, self.pages[-1], markdown)
        except DeliveryError as exc:
            if exc.kind == "fatal":
                return False
            raise
        return True

    async def _spill(self, text: str, cut: int) -> bool:
        """The current page ends at ``cut`` (a code block open there closed), its stream
        stopped; the draft goes on in a new stream, recorded before anything is appended."""
        page = self._lead + text[self._base:cut]
        fence, opening = open_fence(page), fence_opening(page)
        with contextlib.suppress(DeliveryError):  # the final answer replaces the page anyway
            if fence is not None:
                await self.client.append_stream(self.target, self.pages[-1], f"\n{fence}")
            await self.client.stop_stream(self.target, self.pages[-1])
        nxt = cut
        while nxt < len(text) and text[nxt] in "\n ":
            nxt += 1
        self._base, self._lead = nxt, (f"{opening}\n" if opening else "")
        self.streamed = text[:nxt]
        if not self.client.can_stream(self.target):
            log.info("native_stream.no_more_streams", pages=len(self.pages))
            return False
        end = self._cut(text)
        try:
            mid = await self.client.start_stream(self.target, self._lead + text[nxt:end])
        except DeliveryError as exc:
            log.info("native_stream.page_refused", error=str(exc))
            return False
        self.pages.append(mid)
        self.streamed = text[:end]
        # recorded before the draft goes on: the final answer and a recovered turn edit it
        await self.outbox.update(self.row.id, message_ids=list(self.pages))
        return True

    def _page_fits(self, text: str, cut: int) -> bool:
        page = self._lead + text[self._base:cut]
        fence = open_fence(page)
        if fence is not None:
            page += f"\n{fence}"
        return len(page) <= MAX_STREAM_CHARS and self.fits(page)

    def _cut(self, text: str) -> int:
        """Where the current page's part of ``text`` ends: all of it when it fits, else
        the last break (a paragraph's, else a line's, else a space) that fits, never
        before what the page already shows; a page that shows nothing yet takes at least
        one character."""
        if self._page_fits(text, len(text)):
            return len(text)
        shown = len(self.streamed)
        for brk in _BREAKS:
            cuts = [m.start() for m in brk.finditer(text, shown) if m.start() > self._base]
            best = _last_fitting(cuts, lambda c: self._page_fits(text, c))
            if best is not None:
                return best
        if shown > self._base:
            return shown  # nothing more fits on this page: the rest goes on the next
        ends = list(range(self._base + 1, len(text)))
        return _last_fitting(ends, lambda c: self._page_fits(text, c)) or self._base + 1

    async def _record(self) -> None:
        """The progress message's id on the row and in the message index, committed before
        the caller goes on (the index write rides with the awaited one)."""
        assert self.message_id is not None
        await self.outbox.record_progress_message(self.row, self.message_id)
        # the page list restarts with it (a crashed run's single page, deleted by the swap)
        await self.outbox.update(self.row.id, progress_message_id=self.message_id,
                                 progress_state="sent", message_ids=[self.message_id])


def _last_fitting(cuts: list[int], fits: Callable[[int], bool]) -> int | None:
    """The last of the ascending ``cuts`` that fits (fitting is monotonic: a shorter page
    fits when a longer one does), found in a logarithmic number of renderings."""
    lo, hi, best = 0, len(cuts) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(cuts[mid]):
            best, lo = cuts[mid], mid + 1
        else:
            hi = mid - 1
    return best

