"""Phase 1 — prepare input: the prompt gate, the user message, the turn's first checkpoint
(or, for a turn resumed after a crash, the recovery count)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from geode.loop._util import emit, turn_info
from geode.loop.events import CheckpointSaved, ToolResulted, TurnStarted
from geode.loop.protocols import TurnInfo
from geode.loop.state import RunDeps, RunState
from geode.loop.steps import Finish, Observe, PrepareCall, Verify
from geode.loop.termination import TerminationReason
from geode.messages import ImageBlock, Message, TextBlock

__all__ = ["prepare_input", "resume_input"]


async def prepare_input(
    deps: RunDeps, state: RunState, prompt: str, images: tuple[ImageBlock, ...] = ()
) -> PrepareCall | Finish:
    await emit(deps, TurnStarted(turn_id=state.turn_id))
    if deps.prompt_gate is not None:
        decision = await deps.prompt_gate(prompt, turn_info(deps, state))
        if decision.blocked:
            return Finish(TerminationReason.INPUT_BLOCKED, detail=decision.reason)
        if decision.prompt is not None:
            prompt = decision.prompt
    state.messages.append(Message(role="user", content=[TextBlock(text=prompt), *images])
                          if images else Message.user(prompt))
    if deps.checkpointer is not None:
        # The turn exists durably before the model is asked anything.
        await deps.checkpointer.save(
            messages=state.messages, state=state.guard_state(), status="active"
        )
        await emit(deps, CheckpointSaved(point="turn_start"))
    return PrepareCall()


async def resume_input(
    deps: RunDeps, state: RunState,
    open_batch: Callable[[list[Message], TurnInfo], Awaitable[list[Message]]] | None = None,
) -> PrepareCall | Observe | Verify | Finish:
    """Phase 1 of a resumed turn: the user's message is in the chain already.

    ``state`` holds the turn's restored guard counters with ``recoveries`` counted up. The
    count is saved before anything else runs, so a turn that kills the process every time
    still reaches the limit, and is then ended instead of being resumed again.
    ``open_batch`` closes a tool batch the chain left open because a call of it waited for
    an approval: the wait resumes here, in the turn, and the batch's results are saved.
    """
    await emit(deps, TurnStarted(turn_id=state.turn_id, resumed=True,
                                 recoveries=state.recoveries))
    limit = deps.limits.recovery_limit
    if state.recoveries > limit:
        return Finish(
            TerminationReason.RECOVERY_LIMIT,
            detail=f"the turn was interrupted {state.recoveries} times (a crash or a restart "
            f"each time); it was resumed {limit} times and is not resumed again",
        )
    if deps.checkpointer is not None:
        await deps.checkpointer.save(
            messages=state.messages, state=state.guard_state(), status="active"
        )
        await emit(deps, CheckpointSaved(point="turn_resumed"))
    last = state.messages[-1] if state.messages else None
    if open_batch is not None and last is not None and last.role == "assistant" \
            and last.tool_uses:
        calls = last.tool_uses
        state.messages = await open_batch(
            list(state.messages), turn_info(deps, state, f"{state.turn_id}:resume"))
        # a person's time to decide is not the turn's working time (as in phase 4)
        if deps.human_wait is not None:
            state.started_at += deps.human_wait.take_human_wait()
        results = state.messages[-1].tool_results
        for call, res in zip(calls, results, strict=True):
            state.tool_calls.append({"name": call.name, "status": res.outcome})
            await emit(deps, ToolResulted(id=call.id, name=call.name, status=res.outcome,
                                          text=res.text_content[:500], check=res.check))
        if deps.checkpointer is not None:
            await deps.checkpointer.save(
                messages=state.messages, state=state.guard_state(), status="active"
            )
            await emit(deps, CheckpointSaved(point="batch_done"))
        last = state.messages[-1]
    if last is not None and last.role == "user" and last.tool_results and not last.text:
        # A batch's results are the last thing saved (by the batch or by the factory's
        # repair of an open batch); its round was never counted (observe runs after the
        # save): count it now, as the uninterrupted turn would have.
        return Observe(tuple(last.tool_results))
    if last is not None and last.role == "assistant" and not last.tool_uses:
        # The chain ends with a stop proposal whose verdict was never saved: verify it.
        state.last_text = last.text
        return Verify(last.text)
    return PrepareCall()
