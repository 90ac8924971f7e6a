"""Phase 1 — prepare input: the prompt gate, the user message, the turn's first checkpoint."""

from __future__ import annotations

from geode.loop._util import emit, turn_info
from geode.loop.state import RunDeps, RunState
from geode.loop.steps import Finish, PrepareCall
from geode.loop.termination import TerminationReason
from geode.messages import Message

__all__ = ["prepare_input"]


async def prepare_input(deps: RunDeps, state: RunState, prompt: str) -> PrepareCall | Finish:
    await emit(deps, "turn_started", turn_id=state.turn_id)
    if deps.prompt_gate is not None:
        decision = await deps.prompt_gate(prompt, turn_info(deps, state))
        if decision.blocked:
            return Finish(TerminationReason.INPUT_BLOCKED, detail=decision.reason)
        if decision.prompt is not None:
            prompt = decision.prompt
    state.messages.append(Message.user(prompt))
    if deps.checkpointer is not None:
        # The turn exists durably before the model is asked anything.
        await deps.checkpointer.save(
            messages=state.messages, state=state.guard_state(), status="active"
        )
        await emit(deps, "checkpoint", point="turn_start")
    return PrepareCall()
