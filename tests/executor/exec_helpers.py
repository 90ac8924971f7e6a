"""Helpers for the executor tests: tools whose handlers record their calls, in-memory
receipts / timeline / observers, a scripted approver, and a harness around ToolExecutor."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geode.executor import (
    ApprovalRequest,
    MemoryReceiptStore,
    MemoryTimeline,
    RequestMiddleware,
    ResourceLocks,
    ToolExecutor,
)
from geode.hooks import HookRegistry, HookSystem
from geode.loop.protocols import TurnInfo
from geode.messages import ToolResultBlock, ToolUseBlock
from geode.policy import Mode, session_scope
from geode.tools.base import PersonalData, Safety, ToolContext, ToolDef, ToolDeps, ToolOutput
from geode.tools.plan import BoundToolPlan


class Recorder:
    """What handlers were called with, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def names(self) -> list[str]:
        return [n for n, _ in self.calls]


Body = Callable[[ToolContext, dict[str, Any]], Awaitable[ToolOutput]]


def make_tool(
    rec: Recorder,
    name: str,
    *,
    safety: Safety = "read_only",
    props: dict[str, Any] | None = None,
    required: Sequence[str] | None = None,
    key_field: str | None = None,
    body: Body | None = None,
    deadline_s: float = 120.0,
    personal_data: PersonalData = "none",
) -> ToolDef:
    props = props if props is not None else {"path": {"type": "string"}}
    schema = {
        "type": "object",
        "properties": props,
        "required": list(required if required is not None else props),
        "additionalProperties": False,
    }

    async def handler(ctx: ToolContext, **args: Any) -> ToolOutput:
        rec.calls.append((name, args))
        if body is not None:
            return await body(ctx, args)
        return f"{name} ok"

    keys = None
    if key_field is not None:
        def keys(args: dict[str, Any], ctx: ToolContext) -> list[str]:
            return [f"file:{args[key_field]}"]

    return ToolDef(
        name=name, description=f"{name} tool", input_schema=schema, handler=handler,
        safety=safety, resource_keys=keys, deadline_s=deadline_s, personal_data=personal_data,
    )


def standard_tools(rec: Recorder) -> list[ToolDef]:
    """read_file-like, write_file-like, web_fetch-like, and the unattended-denied three."""
    return [
        make_tool(rec, "read_file", key_field=None),
        make_tool(rec, "write_file", safety="write",
                  props={"path": {"type": "string"}, "content": {"type": "string"}},
                  key_field="path"),
        make_tool(rec, "web_fetch", safety="external", props={"url": {"type": "string"}}),
        make_tool(rec, "run_bash", safety="dangerous", props={"command": {"type": "string"}}),
        make_tool(rec, "computer", safety="dangerous", props={"action": {"type": "string"}}),
        make_tool(rec, "delegate_task", safety="dangerous", props={"task": {"type": "string"}}),
    ]


SAMPLE_ARGS: dict[str, dict[str, Any]] = {
    "read_file": {"path": "a.txt"},
    "write_file": {"path": "a.txt", "content": "hi"},
    "web_fetch": {"url": "http://127.0.0.1/x"},
    "run_bash": {"command": "ls"},
    "computer": {"action": "screenshot"},
    "delegate_task": {"task": "sum it up"},
}


class ScriptedApprover:
    """Answers approval requests from a fixed answer; records every request."""

    def __init__(self, answer: str = "allow") -> None:
        self.answer = answer
        self.requests: list[ApprovalRequest] = []
        self.active = 0
        self.max_active = 0

    async def __call__(self, request: ApprovalRequest) -> Any:
        self.requests.append(request)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            for _ in range(3):  # give any concurrent prompt a chance to overlap
                await asyncio.sleep(0)
            return self.answer
        finally:
            self.active -= 1


@dataclass
class Harness:
    executor: ToolExecutor
    plan: BoundToolPlan
    rec: Recorder
    receipts: MemoryReceiptStore
    timeline: MemoryTimeline
    events: list[tuple[str, dict[str, Any]]]
    mode: str
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def turn(self) -> TurnInfo:
        return TurnInfo(session_id="s1", turn_id="t1", round=1, correlation_id="t1:r1",
                        mode=self.mode)

    def call(self, name: str, args: dict[str, Any] | None = None, *, id: str | None = None
             ) -> ToolUseBlock:
        return ToolUseBlock(
            id=id or f"call-{next(self._ids)}", name=name,
            input=SAMPLE_ARGS.get(name, {}) if args is None else args,
        )

    async def run(self, *calls: ToolUseBlock) -> list[ToolResultBlock]:
        return await self.executor.run_batch(list(calls), turn=self.turn(), plan=self.plan)

    async def run_one(self, name: str, args: dict[str, Any] | None = None) -> ToolResultBlock:
        (res,) = await self.run(self.call(name, args))
        return res

    def denied_kinds(self) -> list[tuple[str, str]]:
        return [(e.payload["tool"], e.payload["check"]) for e in self.timeline.entries
                if e.kind == "tool.denied"]


HarnessFactory = Callable[..., Harness]


def make_harness(
    tmp_path: Path,
    mode: Mode = "REPL",
    *,
    approver: Any = None,
    computer_use: object = False,
    channel_tools: Sequence[str] | None = None,
    channel_approve: Sequence[str] = (),
    allow_tools: Sequence[str] = (),
    deny_tools: Sequence[str] = (),
    hooks: HookRegistry | None = None,
    middleware: Sequence[RequestMiddleware] = (),
    tools: Callable[[Recorder], list[ToolDef]] | None = None,
    locks: ResourceLocks | None = None,
    max_result_chars: int = 50_000,
    rec: Recorder | None = None,
    receipts: MemoryReceiptStore | None = None,
) -> Harness:
    rec = rec or Recorder()
    scope = session_scope(mode, channel_tools=channel_tools, channel_approve=channel_approve,
                          computer_use=computer_use,
                          allow_tools=allow_tools, deny_tools=deny_tools)
    # The full plan, not the scope's projection: the executor must hold the line even
    # when a (stale or hand-built) plan offers a tool the scope denies.
    plan = BoundToolPlan.build((tools or standard_tools)(rec))
    receipts = receipts or MemoryReceiptStore()
    timeline = MemoryTimeline()
    observers = HookSystem()
    events: list[tuple[str, dict[str, Any]]] = []
    observers.subscribe(lambda e, d: events.append((e, dict(d))))
    executor = ToolExecutor(
        scope=scope, workspace=tmp_path, hooks=hooks, observers=observers,
        approver=approver, receipts=receipts, timeline=timeline, locks=locks,
        middleware=middleware, max_result_chars=max_result_chars,
        deps=ToolDeps(display=":7"),
    )
    return Harness(executor, plan, rec, receipts, timeline, events, mode)

