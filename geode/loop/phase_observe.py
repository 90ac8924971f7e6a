"""Phase 5 — observe: the stuck-loop guards, then the next round.

Two bounds, both in ``[loop]``:

- ``repeated_error_limit``: the *same call* (tool + canonical JSON arguments) failing with the
  *same error* that many rounds in a row is a loop. Different calls failing with the same
  message (``write_file`` refused "Parent directory does not exist" for one path, then
  another, while the model builds a tree) are progress and reset nothing but their own
  streak. The round before the limit, the model is told once, in that call's tool result,
  how many times the call failed; if it repeats it once more the turn ends.
- ``max_error_rounds``: that many rounds in a row in which *every* call failed, whatever the
  calls, end the turn too (the no-progress bound); also announced once the round before.

Both end with ``repeated_errors``; each note and stop is a ``loop.guard`` timeline row.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from geode.loop._util import emit
from geode.loop.events import LoopGuard
from geode.loop.state import RunDeps, RunState
from geode.loop.steps import Finish, Observe, PrepareCall
from geode.loop.termination import TerminationReason
from geode.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

__all__ = ["call_key", "observe"]

#: the key of the no-progress bound's note in ``RunState.guard_noted``
_NO_PROGRESS = "*no-progress*"


def call_key(name: str, args: dict[str, Any], error: str) -> str:
    """The streak key of a failed call: tool, canonical arguments and the error, hashed
    (the checkpoint keeps the counters; arguments can be large)."""
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(f"{name}\0{canonical}\0{error}".encode()).hexdigest()[:16]
    return f"{name}:{digest}"


async def observe(deps: RunDeps, state: RunState, step: Observe) -> PrepareCall | Finish:
    limits = deps.limits
    calls: dict[str, ToolUseBlock] = {c.id: c for c in step.calls}
    failed: dict[str, ToolResultBlock] = {}
    for r in step.results:
        if not r.is_error:
            continue
        call = calls.get(r.tool_use_id)
        name, args = (call.name, dict(call.input)) if call is not None else ("?", {})
        failed[call_key(name, args, r.text_content)] = r
    # a streak lasts only while its call fails in every round
    state.error_streak = {k: state.error_streak.get(k, 0) + 1 for k in failed}
    all_failed = bool(step.results) and all(r.is_error for r in step.results)
    state.error_rounds = state.error_rounds + 1 if all_failed else 0
    state.round += 1

    worst_key = max(state.error_streak, key=lambda k: state.error_streak[k], default="")
    worst = state.error_streak.get(worst_key, 0)
    if worst_key and worst >= limits.repeated_error_limit:
        result = failed[worst_key]
        name = worst_key.split(":", 1)[0]
        await emit(deps, LoopGuard(guard="repeated_call", action="stopped", count=worst,
                                   limit=limits.repeated_error_limit, tool=name))
        return Finish(
            TerminationReason.REPEATED_ERRORS,
            detail=f"the same call to '{name}' failed the same way {worst} times in a row: "
            f"{result.text_content[:200]}",
        )
    if state.error_rounds >= limits.max_error_rounds:
        await emit(deps, LoopGuard(guard="no_progress", action="stopped",
                                   count=state.error_rounds, limit=limits.max_error_rounds))
        return Finish(
            TerminationReason.REPEATED_ERRORS,
            detail=f"{state.error_rounds} rounds in a row in which every tool call failed",
        )
    notes: dict[str, str] = {}
    for key, count in state.error_streak.items():
        if count == limits.repeated_error_limit - 1 and key not in state.guard_noted:
            state.guard_noted.append(key)
            name = key.split(":", 1)[0]
            notes[failed[key].tool_use_id] = (
                f"[loop guard] This exact call to '{name}' with the same arguments has now "
                f"failed the same way {count} times in a row. Do not repeat it unchanged: "
                "change the arguments or the approach; one more identical failure ends the turn."
            )
            await emit(deps, LoopGuard(guard="repeated_call", action="noted", count=count,
                                       limit=limits.repeated_error_limit, tool=name))
    if (state.error_rounds == limits.max_error_rounds - 1 and state.error_rounds > 0
            and _NO_PROGRESS not in state.guard_noted and step.results):
        state.guard_noted.append(_NO_PROGRESS)
        last = step.results[-1].tool_use_id
        notes[last] = (notes.get(last, "") + "\n" if last in notes else "") + (
            f"[loop guard] Every tool call has failed for {state.error_rounds} rounds in a "
            "row. Step back and try a different approach; one more such round ends the turn."
        )
        await emit(deps, LoopGuard(guard="no_progress", action="noted",
                                   count=state.error_rounds, limit=limits.max_error_rounds))
    if notes:
        _append_notes(state, notes)
    return PrepareCall()


def _append_notes(state: RunState, notes: dict[str, str]) -> None:
    """Add each note to its call's result in the results message just appended."""
    last = state.messages[-1] if state.messages else None
    if last is None or not last.tool_results:
        return
    content = [
        b.model_copy(update={"content": [*b.content, TextBlock(text=notes[b.tool_use_id])]})
        if isinstance(b, ToolResultBlock) and b.tool_use_id in notes else b
        for b in last.content
    ]
    state.messages[-1] = Message(role=last.role, content=content)
