"""Context compaction: keep the head, drop the middle, never split a tool pair.

A ``tool_use`` block and its ``tool_result`` live in adjacent messages (assistant, then
user). The kept tail therefore always starts at an *assistant* message: whatever it
proposes, its results follow it; and no kept user message can hold a result whose call
was dropped. The head (the first user message) keeps the task; a note in it says how
much was omitted, so the model knows the conversation was shortened.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from geode.messages import ImageBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock

__all__ = [
    "CHARS_PER_TOKEN",
    "SHORTENED_HEAD_CHARS",
    "CompactionResult",
    "compact",
    "estimate_tokens",
    "shorten_results",
]

#: The one chars-per-token figure GEODE estimates with (the window check, compaction, the
#: tool-result limit). The SDK tokenizers (tiktoken's o200k/cl100k, Anthropic's) average about
#: 4 characters per token on English prose and code; dense JSON, digits and non-Latin text
#: run lower (2-3), so a result there costs up to about twice the estimate. The result limit is
#: a share (``[loop] max_result_share``, 0.25) of the window, so even then it fits, and the
#: window check before every call uses the same figure with ``compact_at`` headroom.
CHARS_PER_TOKEN = 4
_CHARS_PER_TOKEN = CHARS_PER_TOKEN
_IMAGE_TOKENS = 1600


def estimate_tokens(messages: Sequence[Message], system: str = "") -> int:
    """A cheap, provider-neutral estimate (4 chars/token, images flat)."""
    chars = len(system)
    images = 0
    for m in messages:
        for b in m.content:
            if isinstance(b, TextBlock):
                chars += len(b.text)
            elif isinstance(b, ToolUseBlock):
                chars += len(b.name) + len(json.dumps(b.input, default=str))
            elif isinstance(b, ToolResultBlock):
                for c in b.content:
                    if isinstance(c, TextBlock):
                        chars += len(c.text)
                    else:
                        images += 1
            elif isinstance(b, ImageBlock):
                images += 1
    return chars // _CHARS_PER_TOKEN + images * _IMAGE_TOKENS + 4 * len(messages)


@dataclass(frozen=True)
class CompactionResult:
    messages: list[Message]
    dropped: int


def _summary(dropped: Sequence[Message]) -> str:
    tools = Counter(u.name for m in dropped for u in m.tool_uses)
    parts = [f"{len(dropped)} earlier messages were omitted to fit the context window"]
    if tools:
        parts.append("tool calls in them: " + ", ".join(f"{n}×{c}" for n, c in tools.most_common()))
    return "[context note: " + "; ".join(parts) + ".]"


def compact(messages: Sequence[Message], *, keep_recent: int) -> CompactionResult | None:
    """Drop the middle of ``messages``; ``None`` when nothing can be dropped.

    Keeps ``messages[0]`` (the task) and at least ``keep_recent`` messages from the end,
    extended backwards to the nearest assistant message so no tool pair is split.
    """
    n = len(messages)
    if n < 3:
        return None
    start = max(1, n - max(1, keep_recent))
    while start > 1 and messages[start].role != "assistant":
        start -= 1
    if messages[start].role != "assistant" or start <= 1:
        return None
    dropped = messages[1:start]
    head = messages[0]
    note = TextBlock(text=_summary(dropped))
    new_head = Message(role="user", content=[*head.content, note])
    return CompactionResult(messages=[new_head, *messages[start:]], dropped=len(dropped))


#: what a result shortened to fit the window keeps of its start
SHORTENED_HEAD_CHARS = 2_000


def shorten_results(
    messages: Sequence[Message], *, fits: Callable[[Sequence[Message]], bool]
) -> tuple[list[Message], int]:
    """Replace large *kept* tool results, oldest first, by their head and a note naming the
    result id (``read_result`` pages the rest back in) until ``fits(messages)``.

    Only results the executor kept (``ToolResultBlock.kept``) are shortened: nothing is lost
    that the model cannot read again. Pairs are never split (only content changes).
    Returns the messages and how many results were shortened.
    """
    out = list(messages)
    shortened = 0
    for i, m in enumerate(out):
        if fits(out):
            break
        if not any(_shortenable(r) for r in m.tool_results):
            continue
        content: list[Any] = []
        for b in m.content:
            if isinstance(b, ToolResultBlock) and _shortenable(b) and not fits(out):
                b = _shortened(b)
                shortened += 1
            content.append(b)
            out[i] = Message(role=m.role, content=[*content, *m.content[len(content):]])
    return out, shortened


def _shortenable(r: ToolResultBlock) -> bool:
    return r.kept is not None and len(r.text_content) > 2 * SHORTENED_HEAD_CHARS


def _shortened(r: ToolResultBlock) -> ToolResultBlock:
    assert r.kept is not None
    kept, head = r.kept, SHORTENED_HEAD_CHARS
    left = kept.total_chars - head
    note = (
        f"\n[... shortened to fit the context window: {left} of {kept.total_chars} characters "
        f"left out; read_result(result_id=\"{kept.result_id}\", offset={head}, length={left}) "
        "pages them back in ...]"
    )
    images = [c for c in r.content if not isinstance(c, TextBlock)]
    return r.model_copy(update={
        "content": [TextBlock(text=r.text_content[:head] + note), *images],
        "kept": kept.model_copy(update={"shown_chars": head}),
    })


def pairs_intact(messages: Sequence[Message]) -> bool:
    """True when every tool_result answers a tool_use in the message just before it."""
    for i, m in enumerate(messages):
        results = {r.tool_use_id for r in m.tool_results}
        if not results:
            continue
        if i == 0 or messages[i - 1].role != "assistant":
            return False
        if not results <= {u.id for u in messages[i - 1].tool_uses}:
            return False
    return True
