"""``read_result``: page in a tool result that was too long to pass whole.

A result over the session's limit reaches the model as its head and tail with a marker
naming a result id and the characters cut; its whole (redacted) text is kept by the
executor. This tool returns ``length`` characters of it from ``offset``, exactly, and only
for results of the session it runs in (another session's id reads as unknown).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from geode.tools.base import ToolContext, tool
from geode.tools.errors import ToolFailure

__all__ = ["read_result"]


@tool(safety="read_only", deadline_s=30.0)
async def read_result(
    ctx: ToolContext,
    result_id: Annotated[str, Field(description="The result id named in a cut result's marker")],
    offset: Annotated[int, Field(ge=0, description="First character to return")] = 0,
    length: Annotated[int, Field(ge=1, description="How many characters to return")] = 20_000,
) -> str:
    """Read part of an earlier tool result that was cut because it was too long: returns
    ``length`` characters of the whole result from ``offset`` (the cut result's marker names
    the id, the offset and the length of the part that was left out)."""
    keeper = ctx.deps.kept_results
    if keeper is None:
        raise ToolFailure("no results are kept in this session")
    text = await keeper.read(session_id=ctx.session_id, result_id=result_id)
    if text is None:
        raise ToolFailure(f"unknown result id {result_id!r} (only this session's results)")
    if offset >= len(text):
        raise ToolFailure(f"offset {offset} is past the end: the result has {len(text)} "
                          "characters")
    # a page never longer than a result passes whole, so it is never cut again
    page = min(length, ctx.deps.result_max_chars or length)
    return str(text[offset:offset + page])
