"""Phase 4 — process tools: save the proposed batch, then hand it to the executor."""

from __future__ import annotations

import structlog

from geode.loop._util import emit, result_status, turn_info
from geode.loop.protocols import BatchSaveFailed
from geode.loop.state import RunDeps, RunState
from geode.loop.steps import Finish, Observe, RunTools
from geode.loop.termination import TerminationReason
from geode.messages import Message

__all__ = ["process_tools"]

log = structlog.get_logger(__name__)


async def process_tools(deps: RunDeps, state: RunState, step: RunTools) -> Observe | Finish:
    calls = step.response.message.tool_uses
    turn = turn_info(deps, state, step.snapshot.correlation_id)
    if deps.checkpointer is not None:
        try:
            # Saved before any tool runs: a crash after this line must not re-run a tool,
            # and if this save fails, nothing runs at all.
            await deps.checkpointer.save_batch_proposed(
                messages=state.messages, state=state.guard_state(), turn=turn
            )
        except BatchSaveFailed as exc:
            log.error("batch save failed; nothing ran", error=str(exc))
            return Finish(
                TerminationReason.CHECKPOINT_FAILED,
                detail=f"could not save the proposed tool batch, so no tool ran: {exc}",
            )
        await emit(deps, "checkpoint", point="batch_proposed")
    for call in calls:
        await emit(deps, "tool_call", id=call.id, name=call.name, input=call.input)
    # Dispatch only against the plan bound to this step, never a newer one.
    results = await deps.runner.run_batch(calls, turn=turn, plan=step.snapshot.plan)
    if len(results) != len(calls):  # the executor's contract; guard so pairs never break
        raise RuntimeError("executor returned a different number of results than calls")
    for call, res in zip(calls, results, strict=True):
        status = result_status(res)
        state.tool_calls.append({"name": call.name, "status": status})
        await emit(
            deps,
            "tool_result",
            id=call.id,
            name=call.name,
            status=status,
            text=res.text_content[:500],
        )
    state.messages.append(Message(role="user", content=list(results)))
    if deps.checkpointer is not None:
        await deps.checkpointer.save(
            messages=state.messages, state=state.guard_state(), status="active"
        )
        await emit(deps, "checkpoint", point="batch_done")
    return Observe(tuple(results))
