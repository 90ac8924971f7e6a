"""What answers a replay instead of the world: the recorded model, the recorded approvals,
and the recorded results of the tools that reach outside the workspace.

- :class:`RecordedModel` gives the loop each turn's recorded responses in order, through the
  same adapter interface as any provider; past the last one it fails the call (the turn
  then ends as a model error, which the comparison reports).
- :class:`RecordedApprover` answers an approval as the recording did (a channel's approver,
  by name), or, for a terminal's answers (not audited), as the call's recorded fate says.
- :func:`replay_tools` keeps the built-in tools whose effects stay in the (copied)
  workspace, and answers the others (``web_fetch``, ``web_search``, ``computer``, MCP
  tools, a channel's own tools) from their recorded results: nothing reaches the world.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from geode.errors import ModelError
from geode.executor.decisions import ApprovalAnswer, ApprovalRequest
from geode.messages import Message, ModelResponse, ToolResultBlock, Usage
from geode.providers.base import BaseProvider, ModelRequest
from geode.replay.recording import RecordedTurn, Recording
from geode.tools.base import ToolContext, ToolDef
from geode.tools.errors import ToolFailure

__all__ = ["WORLD_TOOLS", "RecordedApprover", "RecordedModel", "replay_tools"]

#: built-in tools whose effects leave the workspace: answered from the recording
WORLD_TOOLS: frozenset[str] = frozenset({"web_fetch", "web_search", "computer"})

#: a stand-in's schema: the recorded arguments are what the model sent; any object passes
_ANY_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": True}


class RecordedModel(BaseProvider):
    """Replays the current turn's recorded responses (:meth:`start_turn`), one per call."""

    name = "replay"

    def __init__(self) -> None:
        self._responses: list[Message] = []
        self._usage: list[Usage] = []
        self._pos = 0

    def start_turn(self, turn: RecordedTurn) -> None:
        self._responses = list(turn.responses)
        self._usage = [Usage(input_tokens=int(r["payload"].get("input_tokens") or 0),
                             output_tokens=int(r["payload"].get("output_tokens") or 0))
                       for r in turn.rows
                       if r["kind"] == "model.call" and r["payload"].get("outcome") == "ok"]
        self._pos = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if self._pos >= len(self._responses):
            raise ModelError(
                f"replay: the recording has no model response {self._pos + 1} for this turn "
                f"(it holds {len(self._responses)})", kind="fatal", provider=self.name)
        message = self._responses[self._pos]
        usage = self._usage[self._pos] if self._pos < len(self._usage) else Usage()
        self._pos += 1
        return ModelResponse(message=message,
                             stop_reason="tool_use" if message.tool_uses else "end_turn",
                             usage=usage, model=request.model)


class RecordedApprover:
    """Answers each approval request as the recording answered it."""

    def __init__(self, recording: Recording) -> None:
        self._answers: dict[str, Mapping[str, Any]] = {}
        self._ran: set[str] = set()
        for turn in recording.turns:
            for row in turn.rows:
                payload = row["payload"]
                call_id = str(payload.get("call_id", ""))
                if row["kind"] in ("approval.decided", "approval.expired"):
                    self._answers[call_id] = payload
                elif row["kind"] == "tool.started":
                    self._ran.add(call_id)

    async def __call__(
        self, request: ApprovalRequest
    ) -> Literal["allow", "deny", "always"] | ApprovalAnswer:
        recorded = self._answers.get(request.call_id)
        if recorded is not None:
            answer: Literal["allow", "deny"] = (
                "allow" if recorded.get("decision") == "allow" else "deny")
            return ApprovalAnswer(
                answer=answer, note=str(recorded.get("note") or ""),
                by=str(recorded.get("by") or ""), by_id=str(recorded.get("by_id") or ""),
                by_name=str(recorded.get("by_name") or ""),
                outcome=str(recorded.get("outcome") or ""))
        if request.call_id in self._ran:
            return "allow"  # a terminal's yes: the call ran
        return ApprovalAnswer(answer="deny", outcome="unanswered",
                              note="replay: the recording has no answer for this request")


def _recorded_handler(results: Mapping[str, ToolResultBlock]) -> Any:
    async def answer(ctx: ToolContext, **_: Any) -> Any:
        result = results.get(ctx.call_id)
        if result is None:
            raise ToolFailure("replay: this call has no recorded result, and a replay never "
                              "reaches the world")
        if result.is_error:
            raise ToolFailure(result.text_content)
        return list(result.content)

    return answer


def replay_tools(
    recording: Recording, builtin: Sequence[ToolDef]
) -> tuple[list[ToolDef], list[ToolDef]]:
    """``(registry tools, extra tools)`` of a replay of ``recording``.

    Built-ins keep their handlers, except :data:`WORLD_TOOLS` (same name, schema and safety
    level, so every check decides as for the real tool; the handler gives the recorded
    result). A recorded tool this build does not know (an MCP server's, a channel's) is a
    stand-in answering from its recorded result; its schema and safety level were not
    recorded, so it is checked as a read-only tool taking any arguments."""
    results = {cid: res for turn in recording.turns for cid, res in turn.results.items()}
    handler = _recorded_handler(results)
    tools = [dataclasses.replace(t, handler=handler, resource_keys=None)
             if t.name in WORLD_TOOLS else t for t in builtin]
    known = {t.name for t in tools}
    names: dict[str, None] = {}
    for turn in recording.turns:
        for msg in turn.responses:
            for use in msg.tool_uses:
                if use.name not in known:
                    names[use.name] = None
    extra = [ToolDef(name=name, description="(replayed from its recorded results)",
                     input_schema=_ANY_OBJECT, handler=handler,
                     source=f"mcp:{name.split('__', 1)[0]}" if "__" in name else "user")
             for name in names]
    return tools, extra
