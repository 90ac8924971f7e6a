"""Phase 4 — process tools: save the proposed batch, then hand it to the executor."""

from __future__ import annotations

from typing import Any

import structlog

from geode.loop._util import emit, turn_info
from geode.loop.events import CheckpointSaved, ResultCut, ToolProposed, ToolResulted
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
        await emit(deps, CheckpointSaved(point="batch_proposed"))
    for call in calls:
        await emit(deps, ToolProposed(id=call.id, name=call.name, input=call.input))
    if deps.timeline is not None:
        await deps.timeline.flush()  # the turn's rows so far, before the executor's tool rows
    # Dispatch only against the plan bound to this step, never a newer one.
    results = await deps.runner.run_batch(calls, turn=turn, plan=step.snapshot.plan)
    # Time a person took to approve (a channel's approvers) is not the turn's working time:
    # the time budget's clock moves forward by it (an optional ability of the runner).
    if deps.human_wait is not None:
        state.started_at += deps.human_wait.take_human_wait()
    if len(results) != len(calls):  # the executor's contract; guard so pairs never break
        raise RuntimeError("executor returned a different number of results than calls")
    for call, res in zip(calls, results, strict=True):
        status = res.outcome
        entry: dict[str, Any] = {"name": call.name, "status": status}
        kept = res.kept
        if kept is not None and kept.shown_chars < kept.total_chars:
            # the model got head and tail; `run --json` and the stream say so
            entry["cut"] = {"result_id": kept.result_id, "total_chars": kept.total_chars,
                            "shown_chars": kept.shown_chars}
            await emit(deps, ResultCut(call_id=call.id, tool=call.name,
                                       result_id=kept.result_id, total_chars=kept.total_chars,
                                       shown_chars=kept.shown_chars))
        state.tool_calls.append(entry)
        await emit(deps, ToolResulted(id=call.id, name=call.name, status=status,
                                      text=res.text_content[:500], check=res.check))
    state.messages.append(Message(role="user", content=list(results)))
    if deps.checkpointer is not None:
        await deps.checkpointer.save(
            messages=state.messages, state=state.guard_state(), status="active"
        )
        await emit(deps, CheckpointSaved(point="batch_done"))
    return Observe(tuple(results), tuple(calls))
