"""Phase 5 — observe: the repeated-error guard, then the next round."""

from __future__ import annotations

from geode.loop.state import RunDeps, RunState
from geode.loop.steps import Finish, Observe, PrepareCall
from geode.loop.termination import TerminationReason

__all__ = ["observe"]


def observe(deps: RunDeps, state: RunState, step: Observe) -> PrepareCall | Finish:
    # The same error from the same tool, round after round, is a loop the model is stuck in.
    keys = {f"{r.text_content[:120]}" for r in step.results if r.is_error}
    state.error_streak = {k: state.error_streak.get(k, 0) + 1 for k in keys}
    state.round += 1
    worst = max(state.error_streak.values(), default=0)
    if worst >= deps.limits.repeated_error_limit:
        key = max(state.error_streak, key=lambda k: state.error_streak[k])
        return Finish(
            TerminationReason.REPEATED_ERRORS,
            detail=f"the same tool error {worst} times in a row: {key[:200]}",
        )
    return PrepareCall()
