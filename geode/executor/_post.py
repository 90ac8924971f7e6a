"""Checks 10 and 11 — PostToolUse hooks, then the ToolResultBlock the model sees.

PostToolUse runs for every dispatched call (errors too, so a redaction hook sees error
text). ``withhold`` replaces the output with a notice that still says the tool *ran*, so the
model does not repeat an effect it cannot see. Added context is appended after truncation,
so it is never cut off.
"""

from __future__ import annotations

from types import MappingProxyType

from geode.executor._dispatch import Block, DispatchOutcome
from geode.executor.decisions import ToolCall
from geode.hooks.registry import HookEvent, HookRegistry, PostToolOutcome
from geode.loop.protocols import TurnInfo
from geode.messages import TextBlock, ToolResultBlock, ToolStatus

__all__ = ["build_result", "run_post_tool_hooks", "truncate"]


async def run_post_tool_hooks(
    hooks: HookRegistry,
    call: ToolCall,
    outcome: DispatchOutcome,
    *,
    turn: TurnInfo,
    mode: str,
) -> PostToolOutcome:
    text = "\n".join(b.text for b in outcome.content if isinstance(b, TextBlock))
    return await hooks.post_tool_use(
        HookEvent(
            point="PostToolUse",
            session_id=turn.session_id,
            turn_id=turn.turn_id,
            mode=mode,
            tool_name=call.name,
            tool_input=MappingProxyType(call.rewritten().args),
            call_id=call.id,
            tool_output=text,
            is_error=outcome.is_error,
        )
    )


def truncate(blocks: list[Block], max_chars: int) -> list[Block]:
    """Keep text blocks within ``max_chars`` in total (head and tail of the block that
    crosses the limit, with a ``[... truncated N chars ...]`` marker); images pass through."""
    out: list[Block] = []
    budget = max_chars
    for block in blocks:
        if not isinstance(block, TextBlock) or len(block.text) <= budget:
            out.append(block)
            if isinstance(block, TextBlock):
                budget -= len(block.text)
            continue
        text = block.text
        cut = len(text) - budget
        head = budget * 4 // 5  # the start usually says what the output is; keep most of it
        tail = budget - head
        kept = text[:head] + f"\n[... truncated {cut} chars ...]\n" + (text[-tail:] if tail else "")
        out.append(TextBlock(text=kept))
        budget = 0
    return out


def build_result(
    call: ToolCall,
    outcome: DispatchOutcome,
    post: PostToolOutcome | None,
    *,
    max_chars: int,
) -> ToolResultBlock:
    if post is not None and post.withheld is not None:
        notice = (
            f"The result of '{call.name}' was withheld by a PostToolUse hook: {post.withheld}. "
            f"The tool did run (status: {outcome.status}); do not run it again just to see "
            "its output."
        )
        return ToolResultBlock.text(call.id, notice, is_error=outcome.is_error,
                                    status=_STATUS[outcome.status])
    content = truncate(outcome.content, max_chars)
    if post is not None:
        content.extend(TextBlock(text=f"[hook context] {c}") for c in post.context)
    return ToolResultBlock(tool_use_id=call.id, content=content, is_error=outcome.is_error,
                           status=_STATUS[outcome.status])


#: a dispatch's outcome as the result's status
_STATUS: dict[str, ToolStatus] = {"done": "ok", "failed": "error", "uncertain": "uncertain"}
