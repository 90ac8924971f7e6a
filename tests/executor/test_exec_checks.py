"""Each check, in order: a call it denies never reaches a handler and leaves no receipt."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from exec_helpers import Harness, HarnessFactory, Recorder, ScriptedApprover, make_tool

from geode.executor import Deny, ToolCall
from geode.hooks import HookEvent, HookRegistry, HookResult
from geode.loop.protocols import TurnInfo
from geode.tools.base import ToolDef


def assert_denied_without_effect(h: Harness, res: Any, check: str) -> None:
    assert res.is_error
    assert res.text_content.startswith(f"denied by {check}: "), res.text_content
    assert h.rec.calls == []
    assert h.receipts.records == {}
    assert "tool.started" not in h.timeline.kinds()
    assert [k for _, k in h.denied_kinds()] == [check]
    assert [e for e, _ in h.events if e == "tool.denied"] == ["tool.denied"]


class DenyAll:
    async def __call__(self, call: ToolCall, *, turn: TurnInfo) -> ToolCall | Deny:
        return Deny("middleware", "rate limit reached for this tenant")


class Raising:
    async def __call__(self, call: ToolCall, *, turn: TurnInfo) -> ToolCall | Deny:
        raise RuntimeError("boom")


class RenameTo:
    def __init__(self, name: str, args: dict[str, Any] | None = None) -> None:
        self.name, self.args = name, args

    async def __call__(self, call: ToolCall, *, turn: TurnInfo) -> ToolCall | Deny:
        return call.rewritten(name=self.name, args=self.args)


def hooks_with(point: str, fn: Any, **kw: Any) -> HookRegistry:
    reg = HookRegistry()
    reg.register(point, fn, **kw)  # type: ignore[arg-type]
    return reg


async def _block(event: HookEvent) -> HookResult:
    return HookResult.block("writes to a.txt are frozen")


async def _ask(event: HookEvent) -> HookResult:
    return HookResult.ask("hook wants a human to look")


# (check, harness kwargs, tool, args)
CASES: list[tuple[str, dict[str, Any], str, dict[str, Any] | None]] = [
    ("scope", {"mode": "DAEMON"}, "run_bash", None),
    ("scope", {}, "no_such_tool", {}),
    ("middleware", {"middleware": [DenyAll()]}, "read_file", None),
    ("middleware", {"middleware": [Raising()]}, "read_file", None),
    ("middleware", {"middleware": [RenameTo("run_bash", {"command": "ls"})],
                    "mode": "HEADLESS"}, "read_file", None),
    ("policy", {"mode": "HEADLESS"}, "web_fetch", None),
    ("schema", {}, "read_file", {"path": 42}),
    ("hook", {"hooks": hooks_with("PreToolUse", _block)}, "read_file", None),
    ("approval", {"approver": ScriptedApprover("deny")}, "write_file", None),
    ("approval", {"mode": "DAEMON", "hooks": hooks_with("PreToolUse", _ask)}, "read_file", None),
]


@pytest.mark.parametrize(("check", "kw", "tool", "args"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
async def test_each_check_denies_before_any_effect(
    harness: HarnessFactory, check: str, kw: dict[str, Any], tool: str,
    args: dict[str, Any] | None,
) -> None:
    h = harness(**kw)
    res = await h.run_one(tool, args)
    assert_denied_without_effect(h, res, check)


async def test_unknown_tool_is_a_result_that_lists_the_tools(harness: HarnessFactory) -> None:
    h = harness()
    res = await h.run_one("rm_rf", {})
    assert res.text_content.startswith("denied by scope: unknown tool 'rm_rf'")
    assert "read_file" in res.text_content


async def test_schema_denial_names_the_field(harness: HarnessFactory) -> None:
    h = harness(approver=ScriptedApprover("allow"))
    wrong_type = await h.run_one("write_file", {"path": "a.txt", "content": 7})
    missing = await h.run_one("write_file", {"path": "a.txt"})
    extra = await h.run_one("read_file", {"path": "a", "mode": "rw"})
    assert "at 'content'" in wrong_type.text_content
    assert "'content' is a required property" in missing.text_content
    assert "'mode'" in extra.text_content
    assert h.rec.calls == []


async def test_middleware_cannot_lower_safety(harness: HarnessFactory) -> None:
    approver = ScriptedApprover("allow")
    h = harness(approver=approver, middleware=[RenameTo("read_file", {"path": "a.txt"})])
    res = await h.run_one("write_file")
    assert_denied_without_effect(h, res, "middleware")
    assert "lower the safety level" in res.text_content
    assert approver.requests == []


def _personal_tools(rec: Recorder) -> list[ToolDef]:
    return [
        make_tool(rec, "gmail_search", props={"query": {"type": "string"}},
                  personal_data="personal"),
        make_tool(rec, "read_file"),
    ]


async def test_middleware_cannot_lower_personal_data_category(harness: HarnessFactory) -> None:
    h = harness(tools=_personal_tools, middleware=[RenameTo("read_file", {"path": "x"})])
    res = await h.run_one("gmail_search", {"query": "from:boss"})
    assert_denied_without_effect(h, res, "middleware")
    assert "personal-data category" in res.text_content


async def test_middleware_rewrite_reaches_the_handler(harness: HarnessFactory) -> None:
    class Normalise:
        async def __call__(self, call: ToolCall, *, turn: TurnInfo) -> ToolCall | Deny:
            return call.rewritten(args={"path": call.args["path"].lower()})

    h = harness(middleware=[Normalise()])
    res = await h.run_one("read_file", {"path": "README.MD"})
    assert not res.is_error
    assert h.rec.calls == [("read_file", {"path": "readme.md"})]


async def test_middleware_rewrite_that_raises_level_still_faces_policy(
    harness: HarnessFactory,
) -> None:
    h = harness("HEADLESS", middleware=[RenameTo("write_file", {"path": "a", "content": "x"})])
    res = await h.run_one("read_file")
    assert_denied_without_effect(h, res, "policy")


# -- PreToolUse rewrites run checks 1-4 again ------------------------------------------------


def _rewrite(tool: str | None, args: dict[str, Any]) -> Any:
    async def hook(event: HookEvent) -> HookResult:
        return HookResult.rewrite(args, tool=tool)

    return hook


async def test_hook_rewrite_into_a_denied_tool_is_caught_by_scope(harness: HarnessFactory) -> None:
    hooks = hooks_with("PreToolUse", _rewrite("run_bash", {"command": "rm -rf ."}))
    h = harness("DAEMON", hooks=hooks)
    res = await h.run_one("read_file")
    assert_denied_without_effect(h, res, "scope")
    assert "run_bash" in res.text_content


async def test_hook_rewrite_into_bad_args_is_caught_by_schema(harness: HarnessFactory) -> None:
    hooks = hooks_with("PreToolUse", _rewrite(None, {"path": ["not", "a", "string"]}))
    h = harness("DAEMON", hooks=hooks)
    res = await h.run_one("read_file")
    assert_denied_without_effect(h, res, "schema")
    assert "at 'path'" in res.text_content


async def test_hook_rewrite_into_a_write_is_caught_by_policy(harness: HarnessFactory) -> None:
    hooks = hooks_with("PreToolUse", _rewrite("write_file", {"path": "a", "content": "x"}))
    h = harness("SCHEDULER", hooks=hooks)
    res = await h.run_one("read_file")
    assert_denied_without_effect(h, res, "policy")


async def test_hook_rewrite_into_a_write_needs_approval_in_repl(harness: HarnessFactory) -> None:
    hooks = hooks_with("PreToolUse", _rewrite("write_file", {"path": "a", "content": "x"}))
    approver = ScriptedApprover("allow")
    h = harness(hooks=hooks, approver=approver)
    res = await h.run_one("read_file")
    assert not res.is_error
    assert [r.tool for r in approver.requests] == ["write_file"]
    assert h.rec.calls == [("write_file", {"path": "a", "content": "x"})]
    assert h.receipts.records[res.tool_use_id].tool == "write_file"


async def test_hook_rewrite_cannot_lower_safety(harness: HarnessFactory) -> None:
    hooks = hooks_with("PreToolUse", _rewrite("read_file", {"path": "a"}))
    h = harness(hooks=hooks, approver=ScriptedApprover("allow"))
    res = await h.run_one("write_file")
    assert_denied_without_effect(h, res, "hook")
    assert "lower the safety level" in res.text_content


async def test_hook_rewrite_of_args_reaches_the_handler(harness: HarnessFactory) -> None:
    seen: list[dict[str, Any]] = []

    async def second(event: HookEvent) -> HookResult:
        seen.append(dict(event.tool_input or {}))
        return HookResult.cont()

    hooks = hooks_with("PreToolUse", _rewrite(None, {"path": "b.txt"}))
    hooks.register("PreToolUse", second)
    h = harness(hooks=hooks)
    res = await h.run_one("read_file", {"path": "a.txt"})
    assert not res.is_error
    assert seen == [{"path": "b.txt"}]  # rewrites compose along the chain
    assert h.rec.calls == [("read_file", {"path": "b.txt"})]


async def test_hook_ask_forces_a_prompt_for_a_read_only_tool(harness: HarnessFactory) -> None:
    approver = ScriptedApprover("allow")
    h = harness(hooks=hooks_with("PreToolUse", _ask), approver=approver)
    res = await h.run_one("read_file")
    assert not res.is_error
    assert [r.reason for r in approver.requests] == ["hook wants a human to look"]


async def test_hook_cannot_mutate_the_checked_call(harness: HarnessFactory) -> None:
    async def sneaky(event: HookEvent) -> HookResult:
        try:
            event.tool_input["path"] = "/etc/shadow"  # type: ignore[index]
        except TypeError:
            pass
        return HookResult.cont()

    h = harness(hooks=hooks_with("PreToolUse", sneaky))
    await h.run_one("read_file", {"path": "a.txt"})
    assert h.rec.calls == [("read_file", {"path": "a.txt"})]


async def test_raising_pre_hook_blocks(harness: HarnessFactory) -> None:
    async def broken(event: HookEvent) -> HookResult:
        raise RuntimeError("hook bug")

    h = harness(hooks=hooks_with("PreToolUse", broken))
    res = await h.run_one("read_file")
    assert_denied_without_effect(h, res, "hook")
    assert "raised RuntimeError" in res.text_content


async def test_slow_pre_hook_blocks(harness: HarnessFactory) -> None:
    async def slow(event: HookEvent) -> HookResult:
        await asyncio.Event().wait()
        return HookResult.cont()

    h = harness(hooks=hooks_with("PreToolUse", slow, timeout=0.05))
    res = await h.run_one("read_file")
    assert_denied_without_effect(h, res, "hook")
    assert "timed out" in res.text_content


async def test_matcher_limits_hooks_to_matching_tools(harness: HarnessFactory) -> None:
    h = harness(hooks=hooks_with("PreToolUse", _block, matcher="write_.*"),
                approver=ScriptedApprover("allow"))
    read = await h.run_one("read_file")
    write = await h.run_one("write_file")
    assert not read.is_error
    assert write.text_content.startswith("denied by hook: ")
    assert h.rec.names() == ["read_file"]


# -- approval -----------------------------------------------------------------------------


async def test_always_is_remembered_per_tool(harness: HarnessFactory) -> None:
    approver = ScriptedApprover("always")
    h = harness(approver=approver)
    await h.run_one("write_file")
    approver.answer = "deny"  # would deny if asked again
    again = await h.run_one("write_file")
    other = await h.run_one("web_fetch")
    assert not again.is_error
    assert other.text_content.startswith("denied by approval: ")
    assert [r.tool for r in approver.requests] == ["write_file", "web_fetch"]
    assert h.executor.always_allowed == frozenset({"write_file"})


async def test_sensitive_tools_are_asked_every_time(harness: HarnessFactory) -> None:
    def tools(rec: Recorder) -> list[ToolDef]:
        return [make_tool(rec, "gmail_send", safety="external",
                          props={"to": {"type": "string"}}, personal_data="sensitive")]

    approver = ScriptedApprover("always")
    h = harness(approver=approver, tools=tools, allow_tools=["gmail_send"])
    await h.run_one("gmail_send", {"to": "a@b"})
    await h.run_one("gmail_send", {"to": "a@b"})
    assert len(approver.requests) == 2
    assert approver.requests[0].always_allowed is False
    assert h.executor.always_allowed == frozenset()


async def test_approval_prompts_are_one_at_a_time(harness: HarnessFactory) -> None:
    approver = ScriptedApprover("allow")
    h = harness(approver=approver)
    calls = [h.call("write_file", {"path": f"{i}.txt", "content": "x"}) for i in range(4)]
    results = await h.run(*calls)
    assert not any(r.is_error for r in results)
    assert len(approver.requests) == 4
    assert approver.max_active == 1


async def test_a_failing_approver_is_a_denial(harness: HarnessFactory) -> None:
    async def broken(request: Any) -> str:
        raise ConnectionResetError("client went away")

    h = harness(approver=broken)
    res = await h.run_one("write_file")
    assert_denied_without_effect(h, res, "approval")
