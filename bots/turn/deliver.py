"""The deliver phase: the (masked) answer rendered, recorded ``ready`` under the turn's claim,
then delivered; and the delivery of every outbox row (:class:`Deliverer`), one visible final
reply per inbound message (``bots.store.outbox``).

A turn's row records its progress message id as soon as that message exists; the final
answer is then delivered by **editing** recorded messages (the progress message for the
first chunk, recorded placeholders for the rest). An edit is idempotent ("message is not
modified" means it is already there), so after a crash the deliverer just runs again: a
reply whose send outcome is unknown is reconciled through the recorded message id, never
re-sent blindly.

A quick answer (ready before the progress message was due: no progress message) is sent
as a new message instead: its row is marked (``progress_state = "answer"``) before that one
send and its id recorded after it; a crash inside that window leaves the row ``uncertain``
and the answer is not sent again (at most once, like a notice: a platform cannot tell
whether the send landed).

Short notices (pairing codes, command answers) have no progress message: their row is
marked ``sending`` before the single send; a crash inside that window leaves the row
``uncertain`` and it is not re-sent (at most once; the Bot API cannot read history to check).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from bots.events import ReplyTarget
from bots.format import Chunk
from bots.observed import ChannelEvent, DeliveryRetried, RateLimited, ReplySent
from bots.port import DeliveryError, PlatformClient
from bots.progress import MessageRemover
from bots.store.outbox import PLACEHOLDER, Outbox, OutboxRow
from bots.turn.steps import Answered, Done, Dropped, Ready
from bots.voice_reply import SpeakerHost, send_voice_reply

if TYPE_CHECKING:
    from bots.metrics import ChannelMetrics
    from bots.turn.steps import TurnDeps

__all__ = ["DeliverPhase", "Deliverer"]

log = structlog.get_logger(__name__)

#: a turn row's ``progress_state`` while its answer goes out as a new message (a quick
#: answer, no progress message): a crash inside that send leaves its outcome unknown
_ANSWER_SENDING = "answer"


class DeliverPhase:
    """Records and delivers the answers of one layer's turns."""

    def __init__(self, *, deps: TurnDeps) -> None:
        self.deps = deps
        self._fault = deps.fault or _no_fault

    async def record(self, step: Answered) -> Ready | Done:
        """The final answer, rendered, recorded ``ready`` under the turn's claim (a replica
        that lost the thread records nothing). Its text comes masked: the harness masks
        what a turn hands back (its answer, its detail, a recovered answer), the layer what
        it adds (:attr:`Answered.text`)."""
        deps = self.deps
        chunks = deps.client.render(step.text)
        ready = await deps.outbox.mark_ready(step.row, chunks, fence=step.fence)
        if ready is None:
            log.warning("turn.finished_elsewhere", row=step.row.id)
            return Done("finished elsewhere")
        self._fault("final_recorded")
        return Ready(row=ready, fresh=True)

    async def dropped(self, step: Dropped) -> Ready | Done:
        """A turn ``geode queue drop`` took: the notice recorded as its answer, if any."""
        row = await self.deps.outbox.by_id(step.row.id)
        return Ready(row=row) if row.status == "ready" else Done("dropped")

    async def deliver(self, step: Ready) -> Done:
        """Deliver the recorded answer (idempotent: safe to run again after any crash)."""
        await self.deps.deliverer.deliver(step.row)
        if step.fresh:
            self._fault("delivered")
        return Done()

    async def speak(self, row: OutboxRow) -> None:
        """After ``row``'s answer was delivered: the same answer as a voice note, once
        (:mod:`bots.voice_reply`); nothing when the host speaks nothing or the text did not
        land."""
        host = self.deps.host
        if not isinstance(host, SpeakerHost) or host.speaker is None:
            return
        row = await self.deps.outbox.by_id(row.id)
        if row.status != "sent" or not row.loop_turn_id:
            return
        # the model's own words, not the notices put before them in the thread
        outcome = await host.turn_outcome(row.session_key, row.loop_turn_id)
        if outcome.state == "finished" and outcome.text.strip():
            await send_voice_reply(speaker=host.speaker, files=self.deps.files,
                                   outbox=self.deps.outbox, row=row, answer=outcome.text)
            self._fault("voice_reply_sent")


def _no_fault(point: str) -> None:
    """The test seam when no test listens (here, so that it is no call out of the phase)."""


def _rate_limited(exc: DeliveryError) -> bool:
    """A platform's rate-limit answer (429 with Retry-After), as every connector maps it."""
    return exc.kind == "retry" and exc.retry_after is not None


class Deliverer:
    """Sends outbox rows through the platform client, reconcilably."""

    def __init__(
        self, *, client: PlatformClient, outbox: Outbox,
        fault: Any = None, max_attempts: int = 5,
        observe: Callable[[ChannelEvent], None] | None = None,
        metrics: ChannelMetrics | None = None,
    ) -> None:
        """``observe(event)``: the daemon's observers (:class:`ReplySent` with the latency
        from intake, :class:`DeliveryRetried`, :class:`RateLimited`); ``metrics``: the
        daemon's channel counters, incremented here, beside each event (None: counts
        nothing)."""
        self.client = client
        self.outbox = outbox
        self._fault = fault or _no_fault
        self.max_attempts = max_attempts
        self._observe = observe or (lambda event: None)
        self.metrics = metrics

    async def deliver(self, row: OutboxRow) -> OutboxRow:
        """Deliver a ``ready`` row (idempotent: safe to call again after any crash)."""
        if row.status == "sent":
            return row
        if row.kind == "notice":
            return await self._notice(row)
        return await self._turn(row)

    async def _notice(self, row: OutboxRow) -> OutboxRow:
        if row.status == "sending":
            # Crashed inside the send window: it may be visible already. Never re-send.
            log.warning("outbox.notice_uncertain", row=row.id)
            return await self.outbox.finish(row, status="uncertain",
                                            error="send outcome unknown")
        await self.outbox.update(row.id, status="sending")
        ids: list[str] = []
        try:
            for chunk in row.chunks:
                ids.append(await self._send_chunk(row.target, chunk))
        except DeliveryError as exc:
            if _rate_limited(exc):
                self._observe(RateLimited(platform=self.client.platform))
                if self.metrics is not None:
                    self.metrics.rate_limited.labels(platform=self.client.platform).inc()
            status = "uncertain" if exc.kind == "unknown" else "failed"
            return await self.outbox.finish(row, status=status, error=str(exc),
                                            values={"message_ids": ids})
        self._fault("notice_sent_before_record")
        return await self._sent(row, ids)

    async def _send_chunk(self, target: ReplyTarget, chunk: Chunk) -> str:
        try:
            return await self.client.send(target, chunk)
        except DeliveryError as exc:
            if exc.kind != "markup":
                raise
            log.info("outbox.markup_rejected_plain_fallback")
            return await self.client.send(target, chunk, plain=True)

    async def _edit_chunk(self, target: ReplyTarget, message_id: str, chunk: Chunk) -> str:
        """Edit, falling back to plain text; returns the id now holding the chunk."""
        for plain in (False, True):
            try:
                await self.client.edit(target, message_id, chunk, plain=plain)
                return message_id
            except DeliveryError as exc:
                if exc.kind == "not_modified":
                    return message_id  # already there: the reconciliation case
                if exc.kind == "markup" and not plain:
                    continue
                if exc.kind == "not_found":
                    # The message was deleted (by a person): nothing to duplicate, send anew.
                    return await self._send_chunk(target, chunk)
                raise
        raise AssertionError("unreachable")

    async def _turn(self, row: OutboxRow) -> OutboxRow:
        ids = list(row.message_ids)
        if not ids and row.progress_message_id:
            ids = [row.progress_message_id]
        attempt = 0
        last = len(row.chunks)
        first = row.edited
        while True:
            if not ids and row.progress_state == _ANSWER_SENDING:
                # A quick answer's send was under way when the process stopped (or timed
                # out): it may be in the thread already, and nothing can tell (no id came
                # back). Never sent again.
                log.warning("outbox.answer_uncertain", row=row.id)
                return await self.outbox.finish(row, status="uncertain",
                                                error="send outcome unknown")
            try:
                if not ids and row.chunks:
                    # A quick answer: no progress message was shown, the first chunk is
                    # sent as it is (one call, not a placeholder and its edit).
                    ids, first = await self._send_first(row), 1
                # Placeholders first, each recorded before the next: every final chunk is then
                # delivered by an edit of a recorded message (idempotent on retry).
                while len(ids) < len(row.chunks):
                    mid = await self.client.send(row.target, Chunk(formatted=PLACEHOLDER,
                                                                       fallback=PLACEHOLDER))
                    self._fault("placeholder_sent_before_record")
                    ids.append(mid)
                    await self.outbox.update(row.id, message_ids=ids)
                for i in range(first, len(row.chunks)):
                    held = await self._edit_chunk(row.target, ids[i], row.chunks[i])
                    self._fault("final_edited_before_record")
                    if held != ids[i]:
                        ids[i] = held
                    if i + 1 < len(row.chunks):
                        # The last chunk's record is the finishing transaction below.
                        await self.outbox.update(row.id, message_ids=ids, edited=i + 1)
                for mid in ids[len(row.chunks):]:
                    await self._retire(row.target, mid)
                break
            except DeliveryError as exc:
                attempt += 1
                metrics, platform = self.metrics, self.client.platform
                if _rate_limited(exc):
                    self._observe(RateLimited(platform=platform))
                    if metrics is not None:
                        metrics.rate_limited.labels(platform=platform).inc()
                if exc.kind == "fatal" or attempt >= self.max_attempts:
                    log.warning("outbox.delivery_failed", row=row.id, error=str(exc))
                    return await self.outbox.finish(
                        row, status="failed", error=str(exc),
                        values={"attempts": row.attempts + attempt})
                self._observe(DeliveryRetried(platform=platform))
                if metrics is not None:
                    metrics.deliveries_retried.labels(platform=platform).inc()
                await asyncio.sleep(min(30.0, exc.retry_after or 0.2 * 2**attempt))
                row = await self.outbox.by_id(row.id)
                ids = list(row.message_ids) or ids
                first = row.edited
        return await self._sent(row, ids, values={"edited": max(last, row.edited)})

    async def _retire(self, target: ReplyTarget, message_id: str) -> None:
        """A streamed draft's page the final answer does not fill (the draft held tool lines
        or a refused answer): removed where the platform can, else left as ``…`` (never a
        draft beside the answer). Idempotent: a page already gone is no error."""
        try:
            if isinstance(self.client, MessageRemover):
                await self.client.delete_message(target, message_id)
            else:
                await self.client.edit(target, message_id, Chunk(formatted=PLACEHOLDER,
                                                                 fallback=PLACEHOLDER))
        except DeliveryError as exc:
            if exc.kind not in ("not_found", "not_modified"):
                raise

    async def _send_first(self, row: OutboxRow) -> list[str]:
        """The first chunk sent as a new message, its intent recorded before and its id after
        (a crash in between leaves the row's outcome unknown: see :meth:`_turn`)."""
        await self.outbox.update(row.id, progress_state=_ANSWER_SENDING)
        try:
            mid = await self._send_chunk(row.target, row.chunks[0])
        except DeliveryError as exc:
            if exc.kind != "unknown":  # refused: nothing is in the thread, it may go again
                await self.outbox.update(row.id, progress_state="")
            raise
        self._fault("answer_sent_before_record")
        ids = [mid]
        await self.outbox.update(row.id, message_ids=ids, edited=1, progress_state="sent")
        return ids

    async def _sent(
        self, row: OutboxRow, ids: list[str], values: dict[str, Any] | None = None
    ) -> OutboxRow:
        sent, latency = await self.outbox.record_sent(row, ids, values=values)
        platform = self.client.platform
        self._observe(ReplySent(platform=platform, latency_s=latency))
        if self.metrics is not None:
            self.metrics.replies_sent.labels(platform=platform).inc()
            if latency is not None:
                self.metrics.reply_latency.labels(platform=platform).observe(max(0.0, latency))
        return sent
