"""Phase 6 — terminate: verify a stop proposal (with repair rounds), then finish."""

from __future__ import annotations

from geode.loop._util import emit, turn_info
from geode.loop.events import VerifyFailed, VerifyPassed
from geode.loop.state import RunDeps, RunState
from geode.loop.steps import Finish, PrepareCall, Verify
from geode.loop.termination import TerminationReason
from geode.messages import Message

__all__ = ["verify"]


async def verify(deps: RunDeps, state: RunState, step: Verify) -> Finish | PrepareCall:
    """A text-only answer is a *stop proposal*; it completes only when verify passes."""
    if deps.verifier is None:
        return Finish(TerminationReason.NATURAL, text=step.text)
    outcome = await deps.verifier.verify(
        text=step.text, messages=state.messages, turn=turn_info(deps, state)
    )
    if outcome.passed:
        await emit(deps, VerifyPassed(turn_id=state.turn_id))
        return Finish(TerminationReason.NATURAL, text=step.text)
    if outcome.error:
        # The verifier could not decide: asking the model to repair would not help.
        await emit(deps, VerifyFailed(turn_id=state.turn_id, reason=outcome.error,
                                      attempt=state.repair_attempts + 1))
        return Finish(TerminationReason.VERIFICATION_FAILED, text=step.text, detail=outcome.error)
    await emit(deps, VerifyFailed(turn_id=state.turn_id, reason=outcome.reason,
                                  attempt=state.repair_attempts + 1))
    if state.repair_attempts >= deps.limits.repair_budget:
        return Finish(TerminationReason.VERIFICATION_FAILED, text=step.text, detail=outcome.reason)
    state.repair_attempts += 1
    state.round += 1
    state.messages.append(
        Message.user(
            f"[verification] The answer was not accepted: {outcome.reason}\n"
            "Repair the work, then answer again."
        )
    )
    return PrepareCall()
