"""The decisions of a turn, read from its timeline rows, and how two runs of it differ.

A turn's decisions are the host's, step by step: per proposed tool call whether the tool
was offered, whether it was allowed or denied (and by which check), whether it needed an
approval (and the answer), the result's status; each verification's outcome; each
stuck-loop guard; the termination. The recording's rows and the replay's rows go through
the same reader, so a difference is a changed decision, never a changed format.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ABSENT", "Change", "Difference", "compare_turn", "turn_decisions"]

#: the value of a decision one side has and the other does not (a step never reached)
ABSENT = "(absent)"

#: a step's decisions: field -> value, in the order they are shown
StepDecisions = dict[str, str]


@dataclass(frozen=True)
class Change:
    """One field of a step whose value differs."""

    field: str
    recorded: str
    replayed: str


@dataclass(frozen=True, kw_only=True)
class Difference:
    """One step of one turn whose decisions differ between the recording and the replay."""

    session_id: str
    #: the turn's position in the session (1 = its first)
    turn: int
    turn_id: str
    #: ``call <id>``, ``verify <n>``, ``guard <n>`` or ``turn end``
    step: str
    tool: str
    changes: tuple[Change, ...]

    def to_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "turn": self.turn, "turn_id": self.turn_id,
                "step": self.step, "tool": self.tool,
                "changes": [{"field": c.field, "recorded": c.recorded, "replayed": c.replayed}
                            for c in self.changes]}


@dataclass
class _Call:
    tool: str
    denied: str = ""
    started: bool = False
    status: str = ""
    approval: str = ""


def _approval(call: _Call) -> str:
    if call.approval:
        return call.approval
    return "required (nobody to ask)" if call.denied == "approval" else "not asked"


def turn_decisions(rows: Iterable[Mapping[str, Any]]) -> tuple[dict[str, StepDecisions],
                                                                 dict[str, str]]:
    """``(decisions by step, tool by step)`` of one turn's timeline rows (in order)."""
    calls: dict[str, _Call] = {}
    steps: dict[str, StepDecisions] = {}
    verifies = guards = 0
    for row in rows:
        kind, payload = str(row["kind"]), row.get("payload") or {}
        call_id = str(payload.get("call_id", ""))
        if kind == "tool.proposed":
            calls.setdefault(call_id, _Call(tool=str(payload.get("tool", ""))))
            steps.setdefault(f"call {call_id}", {})
        elif kind.startswith(("tool.", "approval.")) and call_id in calls:
            call = calls[call_id]
            if kind == "tool.denied":
                call.denied = str(payload.get("check", "")) or "?"
            elif kind == "tool.started":
                call.started = True
            elif kind == "tool.finished":
                call.status = str(payload.get("status", ""))
            elif kind == "approval.requested":
                call.approval = call.approval or "asked"
            elif kind in ("approval.decided", "approval.expired", "approval.cancelled"):
                answer = payload.get("outcome") or payload.get("decision") or kind[9:]
                call.approval = f"asked: {answer}"
        elif kind == "verify":
            verifies += 1
            steps[f"verify {verifies}"] = {"verification": str(payload.get("decision", ""))}
        elif kind == "loop.guard":
            guards += 1
            steps[f"guard {guards}"] = {
                "guard": f"{payload.get('guard', '')} {payload.get('action', '')}".strip()}
        elif kind == "turn.finished":
            steps["turn end"] = {"termination": str(payload.get("termination", ""))}
    tools: dict[str, str] = {}
    for call_id, call in calls.items():
        step = f"call {call_id}"
        tools[step] = call.tool
        steps[step] = {
            "offered": "no" if call.denied == "scope" else "yes",
            "decision": (f"denied by {call.denied}" if call.denied
                         else "allowed" if call.started else "not run"),
            "approval": _approval(call),
            "status": call.status or ("denied" if call.denied else "-"),
        }
    return steps, tools


def compare_turn(
    recorded: Iterable[Mapping[str, Any]],
    replayed: Iterable[Mapping[str, Any]],
    *,
    session_id: str,
    turn: int,
    turn_id: str,
) -> list[Difference]:
    """Every step of the turn whose decisions differ, in the recording's order (steps only
    the replay has come after)."""
    old, old_tools = turn_decisions(recorded)
    new, new_tools = turn_decisions(replayed)
    out = []
    for step in [*old, *(s for s in new if s not in old)]:
        a, b = old.get(step, {}), new.get(step, {})
        fields = [*a, *(f for f in b if f not in a)]
        changes = tuple(Change(f, a.get(f, ABSENT), b.get(f, ABSENT)) for f in fields
                        if a.get(f, ABSENT) != b.get(f, ABSENT))
        if changes:
            out.append(Difference(session_id=session_id, turn=turn, turn_id=turn_id, step=step,
                                  tool=old_tools.get(step) or new_tools.get(step, ""),
                                  changes=changes))
    return out
