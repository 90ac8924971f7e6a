"""Phase 3 — call the provider bound in the snapshot, with the bounded retry policy.

A model call is never silent for long: while nothing has come from the model for
``waiting_notice_s`` (a stalled endpoint, a retry's backoff), a ``model_waiting`` event says
how long the call has taken and which attempt is running, again every ``waiting_notice_s``;
each retry is a ``model_retry`` event. The whole call, retries and waits included, ends at
``model_call_deadline_s``.

The observers (not the timeline, not the driver) also get :class:`ModelCallStarted` and
:class:`ModelCallFinished` (model, provider, outcome, error kind, tokens, cost, attempts):
metrics and traces per model.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from geode.errors import ModelError
from geode.loop._util import emit, observe, turn_info
from geode.loop.compaction import compact, estimate_tokens, shorten_results
from geode.loop.events import (
    AssistantText,
    Compacted,
    ModelCallFinished,
    ModelCallStarted,
    ModelFailed,
    ModelResponded,
    ModelRetrying,
    ModelWaiting,
    TextDelta,
)
from geode.loop.phase_call import remaining_time
from geode.loop.state import RunDeps, RunState
from geode.loop.steps import CallModel, Finish, PrepareCall, RunTools, Verify
from geode.loop.termination import TerminationReason
from geode.messages import ModelResponse, Usage
from geode.providers.retry import call_with_retry

__all__ = ["call_provider"]


@dataclass(kw_only=True)
class _CallWatch:
    """One model call's progress, as the waiting notices report it."""

    started: float = field(default_factory=time.monotonic)
    #: last sign of life: the call's start, a streamed event, a retry
    heard_at: float = field(default_factory=time.monotonic)
    attempt: int = 1
    retry_error: ModelError | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started


async def _notify_while_waiting(deps: RunDeps, watch: _CallWatch, every: float) -> None:
    last_notice = watch.started
    while True:
        due = max(watch.heard_at, last_notice) + every
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
            continue
        last_notice = time.monotonic()
        await emit(deps, ModelWaiting(elapsed_s=round(watch.elapsed()), attempt=watch.attempt,
                                      max_attempts=deps.retry.max_attempts))


@asynccontextmanager
async def _waiting_notices(deps: RunDeps, watch: _CallWatch) -> AsyncIterator[None]:
    every = deps.limits.waiting_notice_s
    if every is None or every <= 0 or deps.on_event is None:
        yield
        return
    tasks: list[asyncio.Task[None]] = []

    def start() -> None:
        tasks.append(asyncio.create_task(_notify_while_waiting(deps, watch, every)))

    # A timer starts the notices once the call has been silent for ``every``: a call that
    # answers sooner (nearly all) costs no task.
    timer = asyncio.get_running_loop().call_later(every, start)
    try:
        yield
    finally:
        timer.cancel()
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


#: a streamed call's text deltas reach the timeline, observers and driver at most once per
#: this many seconds (the first at once): a model writes ~40 tokens a second, a chat
#: message is edited about once a second, and each event costs every consumer a call
DELTA_MERGE_S = 0.05


class _DeltaMerger:
    """A streamed call's text deltas, merged: the first is emitted at once, later ones
    together once ``DELTA_MERGE_S`` has passed since the last emit (by the next delta, or a
    timer when the model pauses), so a consumer sees the same text in fewer events, in
    order, and never waits more than ``2 * DELTA_MERGE_S`` for what has arrived."""

    def __init__(self, deps: RunDeps) -> None:
        self.deps = deps
        self.pending: list[str] = []
        self.last = -DELTA_MERGE_S
        self.timer: asyncio.TimerHandle | None = None
        #: the timer's emit, awaited before any later one (events stay in order)
        self.flushing: asyncio.Task[None] | None = None
        self._loop = asyncio.get_running_loop()

    async def add(self, text: str) -> None:
        self.pending.append(text)
        now = self._loop.time()
        if now - self.last >= DELTA_MERGE_S:
            await self.flush()
        elif self.timer is None:
            # for a pause only: while the model writes, the next delta flushes (no task, no
            # timer per window); a timer left armed finds nothing waiting and ends
            self.timer = self._loop.call_later(2 * DELTA_MERGE_S, self._due)

    def _due(self) -> None:
        self.timer = None
        if not self.pending:
            return
        if self.flushing is not None and not self.flushing.done():
            # the last one still runs (a slow consumer): this text goes after it
            self.timer = self._loop.call_later(DELTA_MERGE_S, self._due)
            return
        text = self._take()
        self.flushing = asyncio.ensure_future(emit(self.deps, TextDelta(text=text)))

    def _take(self) -> str:
        text = "".join(self.pending)
        self.pending.clear()
        self.last = self._loop.time()
        return text

    async def flush(self) -> None:
        """Emit what waits (after the timer's emit, if one runs)."""
        if self.flushing is not None:
            flushing, self.flushing = self.flushing, None
            await flushing
        if self.pending:
            await emit(self.deps, TextDelta(text=self._take()))

    async def close(self) -> None:
        """The call ended (answered, failed or cancelled): no timer outlives it."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.flushing is not None:
            flushing, self.flushing = self.flushing, None
            if flushing.done():
                return
            flushing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flushing


async def _once(deps: RunDeps, step: CallModel, watch: _CallWatch) -> ModelResponse:
    snap = step.snapshot
    if not deps.stream:
        return await snap.provider.complete(snap.request)
    final: ModelResponse | None = None
    merged = _DeltaMerger(deps)
    try:
        async for ev in snap.provider.stream(snap.request):
            watch.heard_at = time.monotonic()
            if ev.kind == "text_delta" and ev.text:
                await merged.add(ev.text)
            elif ev.kind == "done":
                final = ev.response
        # the whole text is shown before the call's answer is (ModelResponded follows)
        await merged.flush()
    finally:
        await merged.close()
    if final is None:
        raise ModelError("stream ended without a final message", kind="transient")
    return final


def _cost(deps: RunDeps, usage: Usage) -> float | None:
    """The call's cost in USD; None when the model has no configured price."""
    price = deps.limits.price_per_mtok
    if price is None:
        return None
    return (usage.input_tokens * price[0] + usage.output_tokens * price[1]) / 1_000_000


async def _release_spend(deps: RunDeps, state: RunState, *, spent: bool) -> None:
    """A call that ended without usage: its spend reservation dropped or counted in full."""
    if deps.spend is not None:
        await deps.spend.release(turn=turn_info(deps, state), spent=spent)


async def call_provider(
    deps: RunDeps, state: RunState, step: CallModel
) -> RunTools | Verify | PrepareCall | Finish:
    if deps.spend is not None:
        # Before the call, never after: a reached cap must not start one more request.
        # The call's maximum is held until it is recorded (or released below): calls in
        # flight in other threads and replicas count against the caps too.
        refusal = await deps.spend.check(
            turn=turn_info(deps, state), turn_cost_usd=state.cost_usd,
            request=step.snapshot.request, price_per_mtok=deps.limits.price_per_mtok)
        if refusal is not None:
            return Finish(TerminationReason.SPEND_CAP, detail=refusal.message)
    watch = _CallWatch()
    snap = step.snapshot
    observe(deps, ModelCallStarted(turn_id=state.turn_id, model=snap.model,
                                   provider=snap.provider.name, round=state.round))

    def finished(outcome: str, *, error: str = "", usage: Usage | None = None,
                 cost: float = 0.0, stop_reason: str = "") -> None:
        observe(deps, ModelCallFinished(
            turn_id=state.turn_id, model=snap.model, provider=snap.provider.name,
            outcome=outcome, error=error, input_tokens=usage.input_tokens if usage else 0,
            output_tokens=usage.output_tokens if usage else 0, cost_usd=cost,
            stop_reason=stop_reason, attempts=watch.attempt))

    # call_with_retry logs each retry (one line); here it only becomes an event.
    def on_retry(err: ModelError, attempt: int, delay: float) -> None:
        watch.retry_error = err

    async def backoff(delay: float) -> None:
        err = watch.retry_error
        watch.attempt += 1
        watch.heard_at = time.monotonic()
        await emit(deps, ModelRetrying(error=err.kind if err else "", delay_s=round(delay, 1),
                                       attempt=watch.attempt,
                                       max_attempts=deps.retry.max_attempts))
        await asyncio.sleep(delay)

    left = remaining_time(deps, state)
    deadline = deps.limits.model_call_deadline_s
    by_deadline = deadline is not None and (left is None or deadline < left)
    started = time.monotonic()
    try:
        async with _waiting_notices(deps, watch), asyncio.timeout(
            deadline if by_deadline else left
        ):
            response = await call_with_retry(
                lambda: _once(deps, step, watch), policy=deps.retry, on_retry=on_retry,
                sleep=backoff,
            )
    except TimeoutError:
        finished("error", error="timeout")
        await _release_spend(deps, state, spent=True)  # sent: it may have been billed
        if by_deadline:
            await emit(deps, ModelFailed(turn_id=state.turn_id, model=deps.model,
                                         error_kind="call_deadline",
                                         latency_s=time.monotonic() - started))
            return Finish(
                TerminationReason.MODEL_ERROR,
                detail=f"no answer from the model within {deadline:g} s "
                f"(attempt {watch.attempt}/{deps.retry.max_attempts}; "
                "[model] call_deadline_s sets this limit)",
            )
        await emit(deps, ModelFailed(turn_id=state.turn_id, model=deps.model,
                                     error_kind="time_budget",
                                     latency_s=time.monotonic() - started))
        return Finish(
            TerminationReason.TIME_BUDGET, detail="time budget ran out during a model call"
        )
    except ModelError as err:
        finished("error", error=err.kind)
        await _release_spend(deps, state, spent=False)  # refused by the provider: not billed
        await emit(deps, ModelFailed(turn_id=state.turn_id, model=deps.model, error_kind=err.kind,
                                     detail=str(err)[:500],
                                     latency_s=time.monotonic() - started))
        if err.kind == "context_overflow":
            # The provider counted more than our estimate: shorten the oldest large results
            # (each keeps its head and result id) to half the estimate before dropping turns.
            target = estimate_tokens(state.messages) // 2
            state.messages, shortened = shorten_results(
                state.messages, fits=lambda ms: estimate_tokens(ms) <= target)
            if shortened:
                await emit(deps, Compacted(dropped=0, shortened=shortened))
                return PrepareCall()
            compacted = compact(state.messages, keep_recent=max(2, deps.limits.keep_recent // 2))
            if compacted is not None:
                state.messages = compacted.messages
                await emit(deps, Compacted(dropped=compacted.dropped))
                return PrepareCall()
            return Finish(TerminationReason.CONTEXT_EXHAUSTED, detail=str(err))
        return Finish(TerminationReason.MODEL_ERROR, detail=f"{err.kind}: {err}")

    cost = _cost(deps, response.usage)
    finished("ok", usage=response.usage, cost=cost or 0.0,
             stop_reason=str(response.stop_reason or ""))
    state.usage = state.usage + response.usage
    state.cost_usd += cost or 0.0
    if deps.spend is not None:
        await deps.spend.record(turn=turn_info(deps, state), model=step.snapshot.model,
                                usage=response.usage, cost_usd=cost)
    state.messages.append(response.message)
    await emit(deps, ModelResponded(
        turn_id=state.turn_id, model=deps.model, stop_reason=response.stop_reason,
        input_tokens=response.usage.input_tokens, output_tokens=response.usage.output_tokens,
        latency_s=time.monotonic() - started,
    ))
    if response.message.text:
        state.last_text = response.message.text
        await emit(deps, AssistantText(text=response.message.text))
    if response.message.tool_uses:
        return RunTools(step.snapshot, response)
    return Verify(response.message.text)
