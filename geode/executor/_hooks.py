"""Check 5 — PreToolUse decision hooks: block, rewrite, or ask for approval.

A rewrite is not trusted: the executor runs checks 1-4 again on the rewritten call, and a
rewrite may not lower the classification of the call it replaced (see ``lowered``).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from geode.executor.decisions import Deny, ToolCall
from geode.hooks.registry import HookEvent, HookRegistry
from geode.loop.protocols import TurnInfo

__all__ = ["PreHookVerdict", "run_pre_tool_hooks"]


@dataclass(frozen=True)
class PreHookVerdict:
    call: ToolCall
    ask: str | None
    rewritten: bool


async def run_pre_tool_hooks(
    hooks: HookRegistry, call: ToolCall, *, turn: TurnInfo, mode: str
) -> PreHookVerdict | Deny:
    event = HookEvent(
        point="PreToolUse",
        session_id=turn.session_id,
        turn_id=turn.turn_id,
        mode=mode,
        tool_name=call.name,
        tool_input=MappingProxyType(call.rewritten().args),  # hooks never hold our copy
        call_id=call.id,
    )
    outcome = await hooks.pre_tool_use(event)
    if outcome.blocked is not None:
        return Deny("hook", outcome.blocked)
    if not outcome.rewritten:
        return PreHookVerdict(call, outcome.ask, rewritten=False)
    new = call.rewritten(name=outcome.tool_name, args=outcome.tool_input)
    return PreHookVerdict(new, outcome.ask, rewritten=True)
