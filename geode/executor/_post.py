"""Checks 10 and 11 — PostToolUse hooks, then the ToolResultBlock the model sees.

PostToolUse runs for every dispatched call (errors too, so a redaction hook sees error
text). ``withhold`` replaces the output with a notice that still says the tool *ran*, so the
model does not repeat an effect it cannot see. Added context is appended after the cut,
so it is never cut off.

A result whose text is over the session's limit (a share of the model's window, see
``[loop] max_result_share``) is never just lost in the middle: its whole text, redacted, is
kept (:class:`~geode.executor.protocols.ResultKeeper`) as a result id, and the model gets
the head, the tail and a marker with the exact cut and how to read it back with the
``read_result`` tool. Head, tail and offsets are taken from the kept (redacted) text, so
``read_result`` continues exactly where the head stops. Images pass through as before.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from types import MappingProxyType

import structlog

from geode.executor._dispatch import Block, DispatchOutcome
from geode.executor.decisions import ToolCall
from geode.hooks.registry import HookEvent, HookRegistry, PostToolOutcome
from geode.loop.protocols import TurnInfo
from geode.messages import KeptResult, TextBlock, ToolResultBlock, ToolStatus
from geode.secret_redaction import redact_text

__all__ = ["KEEP_OVER_CHARS", "build_result", "cut_to_limit", "run_post_tool_hooks", "truncate"]

log = structlog.get_logger(__name__)

#: a result longer than this is kept even when it passes whole: if the window fills up,
#: compaction shortens it to its head and result id (``geode.loop.compaction``)
KEEP_OVER_CHARS = 8_000

#: keeps a result's whole (redacted) text under the given id
Keep = Callable[[str, str], Awaitable[None]]


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


async def cut_to_limit(
    blocks: list[Block], max_chars: int, keep: Keep | None
) -> tuple[list[Block], KeptResult | None]:
    """``blocks`` whole when their text fits ``max_chars``; else the head and tail of the
    (redacted) text with a marker, the whole kept through ``keep``. Without a keeper, or if
    keeping fails, the old cut (:func:`truncate`) with its marker."""
    texts = [b.text for b in blocks if isinstance(b, TextBlock)]
    whole = "\n".join(texts)
    if len(whole) <= min(max_chars, KEEP_OVER_CHARS) or keep is None:
        return (blocks if len(whole) <= max_chars else truncate(blocks, max_chars)), None
    whole = redact_text(whole)
    result_id = f"res-{os.urandom(8).hex()}"
    try:
        await keep(result_id, whole)
    except Exception:  # the store is down: the model still gets the result, or its ends
        log.warning("tool result not kept", exc_info=True)
        if len(whole) <= max_chars:
            return blocks, None
        return truncate([TextBlock(text=whole)], max_chars), None
    if len(whole) <= max_chars:  # passed whole; kept so compaction can shorten it later
        return blocks, KeptResult(result_id=result_id, total_chars=len(whole),
                                  shown_chars=len(whole))
    total = len(whole)
    head = max_chars * 4 // 5  # the start usually says what the output is; keep most of it
    tail = max_chars - head
    cut = total - head - tail
    marker = (
        f"\n[... {cut} of {total} characters cut here (characters {head} to {head + cut}); "
        f"the whole result is kept as {result_id}: read_result(result_id=\"{result_id}\", "
        f"offset={head}, length={cut}) returns them, in pages if long ...]\n"
    )
    ends = whole[:head] + marker + (whole[total - tail:] if tail else "")
    shown: TextBlock | None = TextBlock(text=ends)
    out: list[Block] = []
    for b in blocks:
        if isinstance(b, TextBlock):
            if shown is not None:
                out.append(shown)
                shown = None
        else:
            out.append(b)
    return out, KeptResult(result_id=result_id, total_chars=total, shown_chars=head + tail)


async def build_result(
    call: ToolCall,
    outcome: DispatchOutcome,
    post: PostToolOutcome | None,
    *,
    max_chars: int,
    keep: Keep | None = None,
) -> ToolResultBlock:
    if post is not None and post.withheld is not None:
        notice = (
            f"The result of '{call.name}' was withheld by a PostToolUse hook: {post.withheld}. "
            f"The tool did run (status: {outcome.status}); do not run it again just to see "
            "its output."
        )
        return ToolResultBlock.text(call.id, notice, is_error=outcome.is_error,
                                    status=_STATUS[outcome.status])
    content, kept = await cut_to_limit(list(outcome.content), max_chars, keep)
    if post is not None:
        content.extend(TextBlock(text=f"[hook context] {c}") for c in post.context)
    return ToolResultBlock(tool_use_id=call.id, content=content, is_error=outcome.is_error,
                           status=_STATUS[outcome.status], kept=kept)


#: a dispatch's outcome as the result's status
_STATUS: dict[str, ToolStatus] = {"done": "ok", "failed": "error", "uncertain": "uncertain"}
