"""Resume after a crash: close a tool batch that was saved but never finished.

The checkpoint chain saves a proposed batch before any tool runs, so after a crash the
last message may be an assistant ``tool_use`` message with no results. Those calls are
**never re-executed automatically** when they had effects: the model gets a tool_result
saying the outcome is unknown and must be checked. Read-only / idempotent calls are safe
to run again and are re-run through the executor (all checks apply again).

A call that never started and that a person must approve first (a channel binding's
``approve`` tools, ``ask_again``) is sent through the executor again too: nothing of it
ran, and the approval check asks again, where the channel's approver finds the request it
posted before the interruption (same session and call id) and resumes that wait, or
returns the decision taken meanwhile. It runs at most once (its effect receipt is unique).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from geode.loop.protocols import ToolRunner, TurnInfo
from geode.messages import Message, ToolResultBlock, ToolUseBlock
from geode.tools.plan import BoundToolPlan

__all__ = [
    "DONE_TEXT",
    "NOT_STARTED_TEXT",
    "UNCERTAIN_TEXT",
    "awaits_approval",
    "dangling_calls",
    "repair_dangling",
]

UNCERTAIN_TEXT = (
    "outcome unknown: GEODE stopped while this call was running, so it may or may not have "
    "taken effect. It was NOT run again. Check the current state before retrying it."
)
NOT_STARTED_TEXT = (
    "not run: GEODE stopped before this call started, so it had no effect. "
    "Propose it again if it is still needed."
)
DONE_TEXT = (
    "completed, but GEODE stopped before its result was saved; the result is lost. "
    "Check the current state instead of running it again."
)


def dangling_calls(messages: Sequence[Message]) -> list[ToolUseBlock]:
    """Tool calls of the last assistant message that have no results after them."""
    if not messages or messages[-1].role != "assistant":
        return []
    return messages[-1].tool_uses


def awaits_approval(
    messages: Sequence[Message], receipts: Mapping[str, str], ask_again: frozenset[str]
) -> bool:
    """True when the open batch holds a call that never started and that needs a person's
    approval (``ask_again``): resuming the turn resumes that wait (see the module doc)."""
    return any(c.name in ask_again and c.id not in receipts for c in dangling_calls(messages))


async def repair_dangling(
    messages: Sequence[Message],
    *,
    runner: ToolRunner,
    plan: BoundToolPlan,
    turn: TurnInfo,
    receipts: Mapping[str, str] | None = None,
    ask_again: frozenset[str] = frozenset(),
) -> tuple[list[Message], list[str]]:
    """Append results for dangling calls; returns (messages, ids reported uncertain).

    ``receipts`` maps call id → receipt status (``uncertain``/``done``/``failed``) for the
    effectful calls that got one; an effectful call without a receipt never started.
    ``ask_again``: tools whose never-started calls go through the executor again (a person
    approves each call: see the module doc).
    """
    receipts = receipts or {}
    calls = dangling_calls(messages)
    if not calls:
        return list(messages), []
    rerun: list[ToolUseBlock] = []
    results: dict[str, ToolResultBlock] = {}
    uncertain: list[str] = []
    for call in calls:
        tool = plan.get(call.name)
        status = receipts.get(call.id)
        if status is None and tool is not None and not tool.effectful:
            rerun.append(call)  # read-only: running it again changes nothing
        elif status is None and call.name in ask_again:
            rerun.append(call)  # never started, and a person says yes before it runs
        elif status is None:
            results[call.id] = ToolResultBlock.text(call.id, NOT_STARTED_TEXT, is_error=True)
        elif status != "done" and tool is not None and tool.idempotent:
            rerun.append(call)  # idempotent: a second run cannot double an effect
        elif status == "done":
            results[call.id] = ToolResultBlock.text(call.id, DONE_TEXT, is_error=True)
        else:
            uncertain.append(call.id)
            results[call.id] = ToolResultBlock.text(call.id, UNCERTAIN_TEXT, is_error=True,
                                                    status="uncertain")
    if rerun:
        for call, res in zip(
            rerun, await runner.run_batch(rerun, turn=turn, plan=plan), strict=True
        ):
            results[call.id] = res
    ordered = [results[c.id] for c in calls]
    return [*messages, Message(role="user", content=list(ordered))], uncertain
