"""Decision hooks: registration, matching, chaining, and the safe choice on failure."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from geode.errors import ConfigError
from geode.hooks import (
    HookEvent,
    HookPromptGate,
    HookRegistry,
    HookResult,
    load_entry_point_hooks,
)
from geode.hooks import registry as registry_mod
from geode.loop.protocols import TurnInfo


def pre(tool: str = "write_file", **args: Any) -> HookEvent:
    return HookEvent(point="PreToolUse", session_id="s", turn_id="t", tool_name=tool,
                     tool_input=args or {"path": "a"})


def test_decorator_returns_the_function_with_and_without_arguments() -> None:
    reg = HookRegistry()

    async def plain(event: HookEvent) -> HookResult:
        return HookResult.cont()

    assert reg.on("PreToolUse", plain) is plain

    @reg.on("PreToolUse", matcher="write_.*", timeout=3)
    async def guarded(event: HookEvent) -> HookResult:
        return HookResult.cont()

    assert guarded.__name__ == "guarded"
    assert reg.hooks_for("PreToolUse", "write_file") == 2
    assert reg.hooks_for("PreToolUse", "read_file") == 1  # matcher is a full match


def test_bad_point_and_bad_matcher_are_config_errors() -> None:
    reg = HookRegistry()
    with pytest.raises(ConfigError, match="Unknown hook point"):
        reg.register("BeforeEverything", lambda e: None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not a valid regex"):
        reg.register("PreToolUse", lambda e: None, matcher="(")


@pytest.mark.parametrize("matcher", [None, "", "*"])
def test_empty_or_star_matcher_matches_all(matcher: str | None) -> None:
    reg = HookRegistry()
    reg.register("PreToolUse", lambda e: None, matcher=matcher)
    assert reg.hooks_for("PreToolUse", "anything") == 1


async def test_block_ends_the_chain() -> None:
    reg = HookRegistry()
    calls: list[str] = []

    @reg.on("PreToolUse")
    async def first(event: HookEvent) -> HookResult:
        calls.append("first")
        return HookResult.block("no")

    @reg.on("PreToolUse")
    async def second(event: HookEvent) -> HookResult:
        calls.append("second")
        return HookResult.cont()

    out = await reg.pre_tool_use(pre())
    assert out.blocked == "no" and calls == ["first"]


async def test_rewrites_compose_and_ask_is_kept() -> None:
    reg = HookRegistry()
    reg.register("PreToolUse", lambda e: HookResult.rewrite({"path": "b"}))
    reg.register("PreToolUse", lambda e: HookResult.ask("check b"))
    reg.register("PreToolUse",
                 lambda e: HookResult.rewrite({**e.tool_input, "n": 1}, tool="edit_file"))  # type: ignore[dict-item]
    out = await reg.pre_tool_use(pre())
    assert out.rewritten and out.tool_name == "edit_file"
    assert dict(out.tool_input) == {"path": "b", "n": 1}
    assert out.ask == "check b"


async def test_sync_hooks_run_off_the_loop() -> None:
    reg = HookRegistry()
    loop_thread: list[bool] = []

    def blocking(event: HookEvent) -> HookResult:
        import threading

        loop_thread.append(threading.current_thread() is threading.main_thread())
        time.sleep(0.01)
        return HookResult.block("sync says no")

    reg.register("PreToolUse", blocking)
    out = await reg.pre_tool_use(pre())
    assert out.blocked == "sync says no" and loop_thread == [False]


def _raiser(event: HookEvent) -> HookResult:
    raise RuntimeError("hook bug")


async def test_safe_choice_for_each_point_when_a_hook_raises() -> None:
    reg = HookRegistry()
    for point in ("UserPromptSubmit", "PreToolUse", "PostToolUse", "PostVerify", "Stop"):
        reg.register(point, _raiser)  # type: ignore[arg-type]
    prompt = await reg.user_prompt_submit(
        HookEvent(point="UserPromptSubmit", session_id="s", turn_id="t", prompt="hi"))
    tool = await reg.pre_tool_use(pre())
    post = await reg.post_tool_use(
        HookEvent(point="PostToolUse", session_id="s", turn_id="t", tool_name="x",
                  tool_output="secret"))
    verify = await reg.post_verify(HookEvent(point="PostVerify", session_id="s", turn_id="t",
                                             text="done"))
    stop = await reg.stop(HookEvent(point="Stop", session_id="s", turn_id="t", text="done"))
    assert prompt.blocked is not None and "raised RuntimeError" in prompt.blocked
    assert tool.blocked is not None and "raised RuntimeError" in tool.blocked
    assert post.withheld is not None and "raised RuntimeError" in post.withheld
    assert verify is not None and "cannot be accepted" in verify
    assert stop is None  # Stop's safe choice is to finalize


async def test_result_not_valid_for_the_point_is_a_failure() -> None:
    reg = HookRegistry()
    reg.register("PostToolUse", lambda e: HookResult.rewrite({"x": 1}))
    reg.register("PreToolUse", lambda e: "yes")  # type: ignore[arg-type,return-value]
    post = await reg.post_tool_use(
        HookEvent(point="PostToolUse", session_id="s", turn_id="t", tool_name="x"))
    tool = await reg.pre_tool_use(pre())
    assert post.withheld is not None and "not valid at PostToolUse" in post.withheld
    assert tool.blocked is not None and "not valid at PreToolUse" in tool.blocked


async def test_timeout_is_the_safe_choice() -> None:
    reg = HookRegistry()

    async def slow(event: HookEvent) -> HookResult:
        await asyncio.Event().wait()
        return HookResult.cont()

    reg.register("PreToolUse", slow, timeout=0.05)
    out = await reg.pre_tool_use(pre())
    assert out.blocked is not None and "timed out after 0.05 s" in out.blocked


async def test_prompt_gate_blocks_rewrites_and_adds_context() -> None:
    reg = HookRegistry()
    turn = TurnInfo(session_id="s", turn_id="t", round=0, correlation_id="c", mode="REPL")

    @reg.on("UserPromptSubmit")
    async def gate(event: HookEvent) -> HookResult:
        if "password" in (event.prompt or ""):
            return HookResult.block("prompt contains a credential")
        return HookResult.rewrite({"prompt": (event.prompt or "").strip()})

    reg.register("UserPromptSubmit", lambda e: HookResult.add_context("today is Monday"))
    gate_fn = HookPromptGate(hooks=reg)
    blocked = await gate_fn("my password is x", turn)
    rewritten = await gate_fn("  hello  ", turn)
    assert blocked.blocked and blocked.reason == "prompt contains a credential"
    assert not rewritten.blocked and rewritten.prompt == "hello\n\ntoday is Monday"


class _EP:
    def __init__(self, name: str, fn: Any) -> None:
        self.name, self.value, self._fn = name, f"pkg:{name}", fn

    def load(self) -> Any:
        return self._fn


def test_entry_point_plugins_register_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    def install(reg: HookRegistry) -> None:
        reg.register("PreToolUse", lambda e: HookResult.block("plugin"))

    monkeypatch.setattr(registry_mod, "entry_points", lambda group: [_EP("guard", install)])
    reg = HookRegistry()
    assert load_entry_point_hooks(reg) == ["guard"]
    assert reg.hooks_for("PreToolUse", "x") == 1


def test_a_broken_plugin_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def install(reg: HookRegistry) -> None:
        raise ImportError("missing dependency")

    monkeypatch.setattr(registry_mod, "entry_points", lambda group: [_EP("guard", install)])
    with pytest.raises(ConfigError, match=r"'guard'.*missing dependency"):
        load_entry_point_hooks(HookRegistry())
