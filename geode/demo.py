"""The offline demo: a scripted model that explores the workspace with real tools.

No API key, no network. It runs through the same factory, executor checks and records as
a real provider; only the model's choices are scripted (and labelled as such).
"""

from __future__ import annotations

from geode.messages import ToolResultBlock
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider, ToolCall

__all__ = ["DEMO_LABEL", "demo_provider"]

DEMO_LABEL = "[demo: scripted model, no API key used]"


def _last_results(request: ModelRequest) -> list[ToolResultBlock]:
    return request.messages[-1].tool_results if request.messages else []


def _answer(request: ModelRequest) -> str:
    # This turn only: a continued session holds earlier prompts and their tool results.
    start = max((i for i, m in enumerate(request.messages) if m.role == "user" and m.text),
                default=0)
    turn = request.messages[start:]
    prompt = turn[0].text if turn and turn[0].role == "user" else ""
    listing = ""
    readme = ""
    for m in turn:
        for r in m.tool_results:
            text = r.text_content
            if not listing:
                listing = text
            else:
                readme = text
    lines = [x for x in listing.splitlines() if x.strip()]
    first = next((x for x in readme.splitlines() if x.strip()), "")
    out = [
        f"{DEMO_LABEL} You asked: {prompt[:200]!r}.",
        f"I listed the workspace ({len(lines)} entries): {', '.join(lines[:8])}"
        + (" ..." if len(lines) > 8 else ""),
    ]
    if first:
        out.append(f"The README starts with: {first[:120]}")
    out.append(
        "Every tool call above went through the executor's checks and was recorded. "
        "Set ANTHROPIC_API_KEY (or another provider's key) and drop --demo to use a real model."
    )
    return "\n".join(out)


def _read_readme(request: ModelRequest) -> ToolCall | str:
    listing = "\n".join(r.text_content for r in _last_results(request))
    for name in ("README.md", "README.rst", "README.txt", "README"):
        if name in listing.split() or f"{name}\n" in listing + "\n":
            return ToolCall("read_file", {"path": name, "limit": 20})
    return _answer(request)


def demo_provider() -> ScriptedProvider:
    return ScriptedProvider(
        [
            ToolCall("list_dir", {"path": "."}),
            _read_readme,
            _answer,
        ]
    )
