"""A streaming turn's draft in the platform's own streaming message (Slack's chat streaming),
where the client offers :class:`~bots.port.NativeStream`; paced edits otherwise.

The streamed message takes the progress message's place, and is recorded as the turn's
progress message before anything is appended to it, so the final answer (an ordinary edit)
and a turn recovered after a crash find it like any placeholder. The swap, in an order that
leaves the thread one message to edit at every crash point:

1. the progress message is deleted (a crash here: the row names a message that is gone; the
   answer is then sent as a new message, ``bots.turn.deliver``);
2. the row's progress message is cleared and its intent to send one recorded (the state a
   progress message has before its send);
3. the stream starts with the progress line (``⏳ Working…``) and the draft so far (a crash
   here: the recovered turn finds the unrecorded ``⏳`` message in the thread and reuses it,
   as it finds a placeholder whose id a crash hid);
4. its id is recorded (durably) and the draft grows by appends.

A stream only appends: the draft is streamed as its text blocks (the tool lines stay in the
heartbeat of the fallback). When the draft stops being an extension of what was streamed (a
draft the verifier refused, a model call retried) or outgrows a stream, the stream is ended
and the message is edited on at the reporter's pace; the final answer replaces it whole.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from bots.events import ReplyTarget
from bots.format import Chunk
from bots.port import DeliveryError, NativeStream, PlatformClient
from bots.progress import WORKING
from bots.store import Outbox, OutboxRow
from bots.turn.stream import AnswerDraft

__all__ = ["NativeDraft", "streamed_text"]

log = structlog.get_logger(__name__)

#: the most a stream carries (Slack takes 12,000 characters a call); a longer draft goes on
#: by edits, which show its latest part
MAX_STREAM_CHARS = 12_000


def streamed_text(draft: AnswerDraft) -> str:
    """The draft as a stream shows it: its text blocks and the running call's text, which
    only grow while the draft is not refused or retried."""
    texts = [body for kind, body in draft.blocks if kind == "text"]
    if draft.pending.strip():
        texts.append(draft.pending)
    return "\n\n".join(t.strip("\n") for t in texts)


class NativeDraft:
    """One turn's draft in a native stream (see the module docstring)."""

    def __init__(self, *, client: NativeStream, edit: PlatformClient, outbox: Outbox,
                 row: OutboxRow, target: ReplyTarget) -> None:
        self.client = client
        self._edit = edit
        self.outbox = outbox
        self.row = row
        self.target = target
        #: the streaming message, once started; what it holds
        self.stream_id: str | None = None
        self.streamed = ""
        #: the stream ended (or never could start): the message is edited from now on
        self.ended = False

    @classmethod
    def of(cls, client: PlatformClient, *, outbox: Outbox, row: OutboxRow,
           target: ReplyTarget) -> NativeDraft | None:
        """A native draft where the client streams (checked once, for the turn)."""
        if not isinstance(client, NativeStream):
            return None
        return cls(client=client, edit=client, outbox=outbox, row=row, target=target)

    async def show(self, message_id: str, draft: AnswerDraft, chunk: Chunk) -> str:
        """Show ``draft`` (``chunk``: its rendering for an edit); returns the id of the
        progress message from now on (the stream's, once it replaced the placeholder).
        Never raises a platform error: a failing indicator never fails the turn."""
        text = streamed_text(draft)
        try:
            if self.stream_id is None and not self.ended:
                if not self.client.can_stream(self.target) or len(text) > MAX_STREAM_CHARS:
                    self.ended = True
                else:
                    # the swap runs to its end even when the reporter closes meanwhile:
                    # the row must never be left naming no message while one streams
                    swap = asyncio.ensure_future(self._start(message_id, text, chunk))
                    try:
                        return await asyncio.shield(swap)
                    except asyncio.CancelledError:
                        with contextlib.suppress(Exception):
                            await swap
                        raise
            if self.stream_id == message_id and not self.ended:
                if await self._append(message_id, text):
                    return message_id
                self.ended = True  # the message is edited from now on
            await self._edit.edit(self.target, message_id, chunk)
        except DeliveryError as exc:
            log.debug("native_stream.failed", error=str(exc))
        except Exception:
            log.warning("native_stream.failed", exc_info=True)
        return message_id

    async def _append(self, message_id: str, text: str) -> bool:
        """The new text appended; False when the stream cannot show the draft: it was
        refused or retried (a stream takes nothing back), grew too long, or the stream
        ended at the platform (stopped by an edit, expired after a silence)."""
        if not text.startswith(self.streamed) or len(text) > MAX_STREAM_CHARS:
            return False
        if text != self.streamed:
            try:
                await self.client.append_stream(self.target, message_id,
                                                text[len(self.streamed):])
            except DeliveryError as exc:
                if exc.kind == "fatal":
                    return False
                raise
            self.streamed = text
        return True

    async def _start(self, placeholder: str, text: str, chunk: Chunk) -> str:
        """The swap (module docstring); returns the progress message's id."""
        try:
            await self.client.delete_message(self.target, placeholder)
        except DeliveryError as exc:
            log.info("native_stream.placeholder_kept", error=str(exc))
            self.ended = True
            await self._edit.edit(self.target, placeholder, chunk)
            return placeholder
        await self.outbox.update(self.row.id, progress_message_id=None, progress_state="sending")
        try:
            mid = await self.client.start_stream(self.target, f"{WORKING}\n\n{text}")
        except DeliveryError as exc:
            # not here (the client remembers the channel): a placeholder again, as the
            # reporter sends one, and edits from now on
            log.info("native_stream.refused", error=str(exc))
            self.ended = True
            mid = await self._edit.send(self.target, chunk)
            await self._record(mid)
            return mid
        self.stream_id, self.streamed = mid, text
        await self._record(mid)
        return mid

    async def _record(self, message_id: str) -> None:
        """The progress message's id on the row and in the message index, committed before
        the caller goes on (the index write rides with the awaited one)."""
        await self.outbox.record_progress_message(self.row, message_id)
        await self.outbox.update(self.row.id, progress_message_id=message_id,
                                 progress_state="sent")
