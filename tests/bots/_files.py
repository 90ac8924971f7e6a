"""Shared by the files-out tests of the three platforms: a scripted model that sends one
workspace file with ``send_file`` and then answers with what the tool said."""

from __future__ import annotations

from geode.messages import ToolResultBlock
from geode.providers.base import ModelRequest
from geode.providers.scripted import ToolCall

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d4944415478da63f8cfc0f01f0005000201a0e3f5d80000000049454e44ae426082")


def tool_results(request: ModelRequest) -> list[str]:
    """The texts of the tool results the model is answering, if any."""
    last = request.messages[-1]
    if last.role != "user" or not isinstance(last.content, list):
        return []
    return [b.content[0].text for b in last.content  # type: ignore[union-attr]
            if isinstance(b, ToolResultBlock) and b.content]


def sending(path: str, caption: str | None = None) -> object:
    """A turn that calls ``send_file(path, caption)``, then answers ``result: <what the
    tool returned>``; told that the call never ran (a crash before it started), it asks
    again, as a model would."""

    def step(request: ModelRequest) -> object:
        results = tool_results(request)
        if results and not all(r.startswith("not run:") for r in results):
            return "result: " + " | ".join(results)
        args = {"path": path, **({"caption": caption} if caption is not None else {})}
        return ToolCall("send_file", args)

    return step

