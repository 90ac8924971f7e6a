"""The ``skill`` tool: opens one of the session's skills (see :mod:`geode.skills._offer`)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from pydantic import Field

from geode.tools.base import ToolContext, tool
from geode.tools.errors import ToolFailure

__all__ = ["skill"]


def _folder_key(args: dict[str, Any], ctx: ToolContext) -> list[str]:
    from geode.skills._offer import SKILLS_DIR

    return [f"file:{ctx.workspace / SKILLS_DIR / str(args.get('name', ''))}"]


@tool(resource_keys=_folder_key, deadline_s=60.0)
async def skill(
    ctx: ToolContext,
    name: Annotated[str, Field(description="the skill's name, as the system prompt lists it")],
) -> str:
    """Open a skill: returns its instructions and puts its files in the workspace under
    .skills/NAME/. Open one when the task matches its description, then follow it."""
    from geode.skills._offer import SkillOpenError

    offered = ctx.deps.skills
    if offered is None:
        raise ToolFailure("no skills are offered in this session")
    try:
        return await asyncio.to_thread(offered.open, name, ctx.workspace)
    except SkillOpenError as exc:
        raise ToolFailure(str(exc)) from None
