"""``memory``: the model keeps what it should remember about the person it answers (scope
``user``) or for everyone in the channel (scope ``channel``): add, replace or remove an
entry by id.

Whose memory a call writes is the session's (:class:`~geode.memory.SessionMemory`, built by
the host from the sender of the message the turn answers and the binding), never an
argument: a message cannot make the model write another person's memory. Channel memory is
written only where the binding's ``memory`` is ``"channel"``; where its ``approve`` names
``memory``, each channel write waits for an approver (the executor's approval check, on the
``scope`` argument) while a person's own memory is written unasked. The tool is ``write``:
in a channel it runs only where the binding allows it (``tools`` or ``approve``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from geode.tools.base import ToolContext, tool
from geode.tools.errors import ToolFailure

__all__ = ["memory"]


def _owner_key(args: dict[str, Any], ctx: ToolContext) -> list[str]:
    mem = ctx.deps.memory
    scope: Literal["user", "channel"] = "channel" if args.get("scope") == "channel" else "user"
    return [f"memory:{scope}:{mem.owner(scope) if mem is not None else ''}"]


@tool(safety="write", personal_data="personal", resource_keys=_owner_key, deadline_s=30.0)
async def memory(
    ctx: ToolContext,
    action: Literal["add", "replace", "remove"],
    scope: Annotated[Literal["user", "channel"], Field(
        description='"user": about the person you are answering (only they see it); '
                    '"channel": for everyone in this channel')] = "user",
    text: Annotated[str | None, Field(max_length=2000, description=(
        "the fact to remember, one short sentence (add, replace)"))] = None,
    id: Annotated[str | None, Field(max_length=32, description=(
        "the entry's id as the memory block shows it, e.g. m3f9a1c2 (replace, remove)"))] = None,
) -> str:
    """Remember a durable fact for later conversations, or correct or forget one. Save
    facts and preferences people want remembered, not instructions for others, secrets or
    passing details."""
    from geode.memory import MemoryWriteError

    mem = ctx.deps.memory
    if mem is None:
        raise ToolFailure("memory is off in this session")
    try:
        if action == "add":
            entry = await mem.add(scope, text, turn_id=ctx.turn_id)
            return f"Saved to {scope} memory as {entry.id}: {entry.text}"
        if action == "replace":
            entry = await mem.replace(scope, id, text, turn_id=ctx.turn_id)
            return f"Replaced {scope} memory {entry.id}: {entry.text}"
        entry = await mem.remove(scope, id, turn_id=ctx.turn_id)
        return f"Removed {scope} memory {entry.id}."
    except MemoryWriteError as exc:
        raise ToolFailure(str(exc)) from None
