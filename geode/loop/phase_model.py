"""Phase 3 — call the provider bound in the snapshot, with the bounded retry policy."""

from __future__ import annotations

import asyncio

import structlog

from geode.errors import ModelError
from geode.loop._util import emit
from geode.loop.compaction import compact
from geode.loop.phase_call import remaining_time
from geode.loop.state import RunDeps, RunState
from geode.loop.steps import CallModel, Finish, PrepareCall, RunTools, Verify
from geode.loop.termination import TerminationReason
from geode.messages import ModelResponse, Usage
from geode.providers.retry import call_with_retry

__all__ = ["call_provider"]

log = structlog.get_logger(__name__)


async def _once(deps: RunDeps, step: CallModel) -> ModelResponse:
    snap = step.snapshot
    if not deps.stream:
        return await snap.provider.complete(snap.request)
    final: ModelResponse | None = None
    async for ev in snap.provider.stream(snap.request):
        if ev.kind == "text_delta" and ev.text:
            await emit(deps, "text_delta", text=ev.text)
        elif ev.kind == "done":
            final = ev.response
    if final is None:
        raise ModelError("stream ended without a final message", kind="transient")
    return final


def _cost(deps: RunDeps, usage: Usage) -> float:
    price = deps.limits.price_per_mtok
    if price is None:
        return 0.0
    return (usage.input_tokens * price[0] + usage.output_tokens * price[1]) / 1_000_000


async def call_provider(
    deps: RunDeps, state: RunState, step: CallModel
) -> RunTools | Verify | PrepareCall | Finish:
    def on_retry(err: ModelError, attempt: int, delay: float) -> None:
        log.warning("model call retry", kind=err.kind, attempt=attempt, delay=round(delay, 2))

    left = remaining_time(deps, state)
    try:
        async with asyncio.timeout(left):
            response = await call_with_retry(
                lambda: _once(deps, step), policy=deps.retry, on_retry=on_retry
            )
    except TimeoutError:
        return Finish(
            TerminationReason.TIME_BUDGET, detail="time budget ran out during a model call"
        )
    except ModelError as err:
        if err.kind == "context_overflow":
            compacted = compact(state.messages, keep_recent=max(2, deps.limits.keep_recent // 2))
            if compacted is not None:
                state.messages = compacted.messages
                await emit(deps, "compacted", dropped=compacted.dropped)
                return PrepareCall()
            return Finish(TerminationReason.CONTEXT_EXHAUSTED, detail=str(err))
        return Finish(TerminationReason.MODEL_ERROR, detail=f"{err.kind}: {err}")

    state.usage = state.usage + response.usage
    state.cost_usd += _cost(deps, response.usage)
    state.messages.append(response.message)
    await emit(deps, "model_response", stop_reason=response.stop_reason)
    if response.message.text:
        state.last_text = response.message.text
        await emit(deps, "assistant_text", text=response.message.text)
    if response.message.tool_uses:
        return RunTools(step.snapshot, response)
    return Verify(response.message.text)
