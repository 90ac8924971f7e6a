"""Shell-command hooks: Claude Code's stdin/stdout/exit-code protocol, via tiny scripts."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from geode.errors import ConfigError
from geode.hooks import HookEvent, HookRegistry, load_shell_hooks


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def event(tool: str = "write_file", **args: object) -> HookEvent:
    return HookEvent(point="PreToolUse", session_id="sess-1", turn_id="t", mode="DAEMON",
                     tool_name=tool, tool_input=args or {"path": "a.txt"}, call_id="c1")


def registry(point: str, command: str, **entry: object) -> HookRegistry:
    reg = HookRegistry()
    load_shell_hooks(reg, {point: [{"command": command, **entry}]},
                     env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    return reg


async def test_exit_2_blocks_with_stderr(tmp_path: Path) -> None:
    cmd = script(tmp_path, "deny.sh", "cat >/dev/null\necho 'no writes on Fridays' >&2\nexit 2\n")
    out = await registry("PreToolUse", cmd).pre_tool_use(event())
    assert out.blocked == "no writes on Fridays"


async def test_json_decision_block(tmp_path: Path) -> None:
    cmd = script(tmp_path, "block.sh",
                 "cat >/dev/null\necho '{\"decision\": \"block\", \"reason\": \"frozen\"}'\n")
    out = await registry("PreToolUse", cmd).pre_tool_use(event())
    assert out.blocked == "frozen"


async def test_json_permission_decision_deny_and_ask(tmp_path: Path) -> None:
    deny = script(tmp_path, "deny.sh", "cat >/dev/null\necho '{\"hookSpecificOutput\": "
                  "{\"hookEventName\": \"PreToolUse\", \"permissionDecision\": \"deny\", "
                  "\"permissionDecisionReason\": \"policy\"}}'\n")
    ask = script(tmp_path, "ask.sh",
                 "cat >/dev/null\necho '{\"decision\": \"ask\", \"reason\": \"look first\"}'\n")
    assert (await registry("PreToolUse", deny).pre_tool_use(event())).blocked == "policy"
    asked = await registry("PreToolUse", ask).pre_tool_use(event())
    assert asked.blocked is None and asked.ask == "look first"


async def test_json_rewrite_of_tool_input(tmp_path: Path) -> None:
    cmd = script(tmp_path, "rewrite.sh", "cat >/dev/null\n"
                 "echo '{\"decision\": \"approve\", \"tool_input\": {\"path\": \"safe/a.txt\"}}'\n")
    out = await registry("PreToolUse", cmd).pre_tool_use(event())
    assert out.rewritten and out.tool_name == "write_file"
    assert dict(out.tool_input) == {"path": "safe/a.txt"}


async def test_updated_input_and_tool_rename(tmp_path: Path) -> None:
    cmd = script(tmp_path, "rename.sh", "cat >/dev/null\n"
                 "echo '{\"tool_name\": \"edit_file\", \"hookSpecificOutput\": "
                 "{\"updatedInput\": {\"path\": \"b\"}}}'\n")
    out = await registry("PreToolUse", cmd).pre_tool_use(event())
    assert (out.tool_name, dict(out.tool_input)) == ("edit_file", {"path": "b"})


async def test_stdin_carries_the_event_and_env_is_minimal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEODE_TEST_SECRET", "sk-should-not-leak")
    dump = tmp_path / "stdin.json"
    envdump = tmp_path / "env.txt"
    cmd = script(tmp_path, "dump.sh", f"cat > {dump}\nenv > {envdump}\n")
    reg = HookRegistry()
    load_shell_hooks(reg, {"PreToolUse": [{"command": cmd}]})  # the default minimal env
    out = await reg.pre_tool_use(event(path="x.txt"))
    assert out.blocked is None and not out.rewritten
    payload = json.loads(dump.read_text())
    assert payload["hook_event_name"] == "PreToolUse"
    assert payload["session_id"] == "sess-1"
    assert payload["tool_name"] == "write_file"
    assert payload["tool_input"] == {"path": "x.txt"}
    assert payload["tool_use_id"] == "c1"
    env = envdump.read_text()
    assert "sk-should-not-leak" not in env
    assert "GEODE_HOOK_EVENT=PreToolUse" in env and "GEODE_SESSION_ID=sess-1" in env


async def test_other_exit_codes_fail_closed(tmp_path: Path) -> None:
    cmd = script(tmp_path, "crash.sh", "cat >/dev/null\necho oops >&2\nexit 1\n")
    out = await registry("PreToolUse", cmd).pre_tool_use(event())
    assert out.blocked is not None and "HookCommandError" in out.blocked


async def test_invalid_json_object_fails_closed(tmp_path: Path) -> None:
    cmd = script(tmp_path, "arr.sh", "cat >/dev/null\necho '[1, 2]'\n")
    out = await registry("PreToolUse", cmd).pre_tool_use(event())
    assert out.blocked is not None


async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # an inline command whose background grandchild holds no pipe: killing only the shell
    # would return promptly and leave the grandchild running
    cmd = f"cat >/dev/null; sleep 30 </dev/null >/dev/null 2>&1 & echo $! > {pidfile}; wait"
    out = await registry("PreToolUse", cmd, timeout=0.5).pre_tool_use(event())
    assert out.blocked is not None and "timed out" in out.blocked
    pid = int(pidfile.read_text())
    for _ in range(100):
        if not _alive(pid):
            break
        await asyncio.sleep(0.02)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    """Running (a reaped or zombie process counts as dead)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


async def test_post_tool_use_block_withholds_and_context_is_added(tmp_path: Path) -> None:
    block = script(tmp_path, "dlp.sh",
                   "cat >/dev/null\necho '{\"decision\": \"block\", \"reason\": \"has a key\"}'\n")
    ctx = script(tmp_path, "ctx.sh", "cat >/dev/null\necho '{\"hookSpecificOutput\": "
                 "{\"additionalContext\": \"lint: 2 warnings\"}}'\n")
    ev = HookEvent(point="PostToolUse", session_id="s", turn_id="t", tool_name="write_file",
                   tool_output="ok")
    assert (await registry("PostToolUse", block).post_tool_use(ev)).withheld == "has a key"
    assert (await registry("PostToolUse", ctx).post_tool_use(ev)).context == ("lint: 2 warnings",)


async def test_stop_block_means_continue_with(tmp_path: Path) -> None:
    cmd = script(tmp_path, "tests.sh", "cat >/dev/null\necho 'tests fail: 3' >&2\nexit 2\n")
    ev = HookEvent(point="Stop", session_id="s", turn_id="t", text="done")
    assert await registry("Stop", cmd).stop(ev) == "tests fail: 3"


def test_config_errors_are_explained() -> None:
    reg = HookRegistry()
    with pytest.raises(ConfigError, match="not a hook point"):
        load_shell_hooks(reg, {"PreTool": [{"command": "true"}]})
    with pytest.raises(ConfigError, match="needs command"):
        load_shell_hooks(reg, {"PreToolUse": [{"matcher": "x"}]})
    with pytest.raises(ConfigError, match="timeout must be > 0"):
        load_shell_hooks(reg, {"PreToolUse": [{"command": "true", "timeout": 0}]})
    assert load_shell_hooks(reg, {"PreToolUse": [{"command": "true", "matcher": "w.*"}]}) == 1
    assert reg.hooks_for("PreToolUse", "write_file") == 1
    assert reg.hooks_for("PreToolUse", "read_file") == 0
