"""Phase 2 — prepare call: guards, compaction, the pinned StepSnapshot."""

from __future__ import annotations

import time

import structlog

from geode.loop._util import emit, new_id
from geode.loop.compaction import compact, estimate_tokens, shorten_results
from geode.loop.events import Compacted
from geode.loop.snapshot import StepSnapshot
from geode.loop.state import RunDeps, RunState
from geode.loop.steps import CallModel, Finish
from geode.loop.termination import TerminationReason
from geode.providers.base import ModelRequest

__all__ = ["prepare_call", "remaining_time"]

log = structlog.get_logger(__name__)


def remaining_time(deps: RunDeps, state: RunState) -> float | None:
    budget = deps.limits.time_budget_s
    if budget is None:
        return None
    return budget - (time.monotonic() - state.started_at)


async def prepare_call(deps: RunDeps, state: RunState) -> CallModel | Finish:
    limits = deps.limits
    if state.round >= limits.max_rounds:
        return Finish(TerminationReason.MAX_ROUNDS, detail=f"{limits.max_rounds} rounds used")
    left = remaining_time(deps, state)
    if left is not None and left <= 0:
        return Finish(TerminationReason.TIME_BUDGET, detail=f"{limits.time_budget_s}s budget used")
    if limits.cost_budget_usd is not None and state.cost_usd >= limits.cost_budget_usd:
        return Finish(
            TerminationReason.COST_BUDGET,
            detail=f"${state.cost_usd:.4f} spent of ${limits.cost_budget_usd:.4f}",
        )

    system = deps.system_prompt()
    plan = deps.plan_source()  # bound for this step; a refresh affects the next step only
    budget = int(limits.context_window * limits.compact_at)
    if estimate_tokens(state.messages, system) > budget:
        # large results first, oldest first: each keeps its head and its result id
        state.messages, shortened = shorten_results(
            state.messages, fits=lambda ms: estimate_tokens(ms, system) <= budget)
        if shortened:
            log.info("context compacted", shortened_results=shortened)
            await emit(deps, Compacted(dropped=0, shortened=shortened))
        compacted = None
        if estimate_tokens(state.messages, system) > budget:
            compacted = compact(state.messages, keep_recent=limits.keep_recent)
        if compacted is not None:
            state.messages = compacted.messages
            log.info("context compacted", dropped=compacted.dropped)
            await emit(deps, Compacted(dropped=compacted.dropped))
        if estimate_tokens(state.messages, system) > limits.context_window:
            return Finish(
                TerminationReason.CONTEXT_EXHAUSTED,
                detail="the conversation does not fit the model's context window",
            )

    correlation_id = new_id("c")
    request = ModelRequest(
        model=deps.model,
        system=system,
        messages=tuple(state.messages),
        tools=plan.specs(),
        max_tokens=limits.max_tokens,
        correlation_id=correlation_id,
    )
    return CallModel(
        StepSnapshot(
            round=state.round,
            model=deps.model,
            provider=deps.provider,
            plan=plan,
            correlation_id=correlation_id,
            request=request,
        )
    )
