"""A session's conversation as people read it: user and assistant turns, each tool call
with its outcome (``geode sessions transcript``).

Built from the checkpoint chain's messages (what the model saw; a compacted session shows
its summary, not what was dropped), redacted like every output: registered secrets,
credential-named argument keys, known key shapes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from geode.messages import Message, ToolResultBlock, ToolStatus
from geode.store.record_redaction import bound, redact, redact_text

__all__ = ["ToolCallEntry", "TranscriptEntry", "build_transcript", "render_transcript"]


@dataclass(frozen=True, kw_only=True)
class ToolCallEntry:
    id: str
    name: str
    input: dict[str, Any]
    #: None while the call has no result in the chain (a crash before it finished)
    status: ToolStatus | None = None
    check: str | None = None
    result: str = ""
    #: the result was over the size limit: ``result_id``, ``total_chars``, ``shown_chars``
    #: (what the model got of it: head and tail; the whole is kept for read_result)
    cut: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class TranscriptEntry:
    role: Literal["user", "assistant"]
    text: str
    tool_calls: list[ToolCallEntry] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def build_transcript(
    messages: Sequence[Message], *, secrets: Iterable[str] = (), max_result_chars: int = 2_000
) -> list[TranscriptEntry]:
    """The conversation, redacted: tool results are folded into the call they answer."""
    extra = tuple(secrets)
    results: dict[str, ToolResultBlock] = {
        r.tool_use_id: r for m in messages for r in m.tool_results
    }
    out: list[TranscriptEntry] = []
    for m in messages:
        text = redact_text(m.text, extra)
        if m.role == "user":
            if text:  # a message of tool results only is shown with its calls
                out.append(TranscriptEntry(role="user", text=text))
            continue
        calls = []
        for use in m.tool_uses:
            res = results.get(use.id)
            calls.append(ToolCallEntry(
                id=use.id, name=use.name,
                input=bound(redact(dict(use.input), extra), max_string=max_result_chars),
                status=res.outcome if res is not None else None,
                check=res.check if res is not None else None,
                result=redact_text(res.text_content, extra)[:max_result_chars]
                if res is not None else "",
                cut=_cut(res),
            ))
        out.append(TranscriptEntry(role="assistant", text=text, tool_calls=calls))
    return out


def _cut(res: ToolResultBlock | None) -> dict[str, Any] | None:
    kept = res.kept if res is not None else None
    if kept is None or kept.shown_chars >= kept.total_chars:
        return None
    return {"result_id": kept.result_id, "total_chars": kept.total_chars,
            "shown_chars": kept.shown_chars}


def render_transcript(entries: Sequence[TranscriptEntry]) -> list[str]:
    """Plain-text lines of a transcript."""
    import json

    lines: list[str] = []
    for e in entries:
        if e.text:
            head, *rest = e.text.splitlines() or [""]
            lines.append(f"{e.role}: {head}")
            lines.extend(f"  {line}" for line in rest)
        for c in e.tool_calls:
            args = json.dumps(c.input, ensure_ascii=False, default=str)
            if len(args) > 200:
                args = args[:197] + "..."
            outcome: str = c.status or "no result"
            if c.check:
                outcome += f" by {c.check}"
            if c.cut is not None:
                outcome += (f"; cut: {c.cut['shown_chars']} of {c.cut['total_chars']} "
                            f"characters shown, the rest kept as {c.cut['result_id']}")
            lines.append(f"  → {c.name} {args}  [{outcome}]")
            for line in c.result.splitlines()[:5]:
                lines.append(f"      {line}")
    return lines
