"""Shell-command hooks from config, speaking Claude Code's hook protocol.

.. code-block:: toml

    [[hooks.PreToolUse]]
    matcher = "write_.*|run_bash"     # regex on the whole tool name; omit for every tool
    command = "~/.geode/hooks/guard.sh"
    timeout = 10                      # seconds

The command runs under ``/bin/sh -c`` with a minimal environment (``PATH``, ``HOME``,
``LANG`` plus ``GEODE_HOOK_EVENT`` / ``GEODE_SESSION_ID``), in its own process group (killed
whole on timeout), with the event as JSON on stdin: ``hook_event_name``, ``session_id``,
``turn_id``, ``mode``, and per point ``tool_name``, ``tool_input``, ``tool_use_id``,
``tool_output``, ``is_error``, ``prompt``, ``text``.

How its answer is read:

- exit 0 and empty stdout: continue. Exit 0 and non-JSON stdout: continue (UserPromptSubmit:
  the text is added as context, as Claude Code does).
- exit 2: *block* with stderr as the reason.
- any other exit code: the hook failed -> the registry's safe choice for the point (Claude
  Code treats it as a non-blocking error; a guard that crashes must not wave calls through).
- exit 0 with a JSON object on stdout:
  ``decision`` or ``hookSpecificOutput.permissionDecision``: ``"block"``/``"deny"`` -> block;
  ``"approve"``/``"allow"`` -> continue (a hook cannot *grant* approval here: the mode's
  policy still applies); ``"ask"`` -> ask (PreToolUse); ``"revise"`` (PostVerify),
  ``"withhold"`` (PostToolUse). ``"continue": false`` counts as block (Stop: finalize).
  ``reason`` / ``permissionDecisionReason`` / ``stopReason`` give the reason.
  ``tool_input`` or ``hookSpecificOutput.updatedInput`` rewrites the arguments, ``tool_name``
  the tool (PreToolUse; a new name alone keeps the arguments); ``prompt`` rewrites the prompt
  (UserPromptSubmit);
  ``additionalContext`` (top level or in ``hookSpecificOutput``) adds context.
  Precedence when several are given: block > ask > rewrite > add context.

"Block" means the point's blocking action: PreToolUse / UserPromptSubmit block, PostToolUse
withhold, PostVerify revise, Stop continue_with (Claude Code's "block the stop").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from geode.errors import ConfigError
from geode.hooks.registry import HOOK_POINTS, HookEvent, HookPoint, HookRegistry, HookResult

__all__ = ["HookCommandError", "ShellHook", "load_shell_hooks"]

log = structlog.get_logger(__name__)

_MAX_REASON = 2_000


class HookCommandError(Exception):
    """A shell hook exited with a code other than 0 or 2, or printed invalid JSON."""


def _blocking(point: HookPoint, reason: str) -> HookResult:
    match point:
        case "PostToolUse":
            return HookResult.withhold(reason)
        case "PostVerify":
            return HookResult.revise(reason)
        case "Stop":
            return HookResult.continue_with(reason)
        case _:
            return HookResult.block(reason)


class ShellHook:
    """One configured command; an async callable the :class:`HookRegistry` runs."""

    def __init__(
        self,
        *,
        point: HookPoint,
        command: str,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.point = point
        self.command = command
        self.cwd = cwd
        self.env = dict(env) if env is not None else {}
        self.__qualname__ = f"shell:{command}"

    async def __call__(self, event: HookEvent) -> HookResult:
        env = {**self.env, "GEODE_HOOK_EVENT": event.point, "GEODE_SESSION_ID": event.session_id}
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=self.cwd,
            start_new_session=True,  # its own process group, so a timeout kills children too
        )
        try:
            out, err = await proc.communicate(json.dumps(event.to_json()).encode())
        finally:
            if proc.returncode is None:  # cancelled by the registry's timeout
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        stdout = out.decode(errors="replace").strip()
        stderr = err.decode(errors="replace").strip()
        if proc.returncode == 2:
            return _blocking(self.point, stderr[:_MAX_REASON] or f"blocked by {self.command}")
        if proc.returncode != 0:
            raise HookCommandError(f"exit code {proc.returncode}: {stderr[:200]}")
        return self._parse(stdout, event.tool_input)

    def _parse(self, stdout: str, current_input: Mapping[str, Any] | None) -> HookResult:
        if not stdout:
            return HookResult.cont()
        try:
            data = json.loads(stdout)
        except json.JSONDecodeError:
            if self.point == "UserPromptSubmit":
                return HookResult.add_context(stdout[:_MAX_REASON])
            return HookResult.cont()
        if not isinstance(data, dict):
            raise HookCommandError("stdout JSON is not an object")
        return _from_json(self.point, data, current_input)


def _from_json(
    point: HookPoint, data: dict[str, Any], current_input: Mapping[str, Any] | None
) -> HookResult:
    specific = data.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    decision = specific.get("permissionDecision") or data.get("decision")
    reason = str(
        specific.get("permissionDecisionReason")
        or data.get("reason")
        or data.get("stopReason")
        or ""
    )[:_MAX_REASON]
    if data.get("continue") is False:
        decision = "approve" if point == "Stop" else "block"
    context = specific.get("additionalContext") or data.get("additionalContext")

    if decision in ("block", "deny"):
        return _blocking(point, reason or "blocked by hook")
    if decision == "revise" and point == "PostVerify":
        return HookResult.revise(reason or "revision requested by hook")
    if decision == "withhold" and point == "PostToolUse":
        return HookResult.withhold(reason or "withheld by hook")
    if decision == "ask":
        return HookResult.ask(reason or "hook asks for approval")  # invalid outside PreToolUse
    if decision not in (None, "approve", "allow", "accept", "continue"):
        raise HookCommandError(f"unknown decision {decision!r}")

    if point == "PreToolUse" and ("tool_input" in data or "updatedInput" in specific
                                  or "tool_name" in data):
        new_input = specific.get("updatedInput", data.get("tool_input", current_input))
        new_tool = data.get("tool_name")
        if not isinstance(new_input, dict):
            raise HookCommandError("tool_input must be a JSON object")
        if new_tool is not None and not isinstance(new_tool, str):
            raise HookCommandError("tool_name must be a string")
        return HookResult.rewrite(new_input, tool=new_tool)
    if point == "UserPromptSubmit" and isinstance(data.get("prompt"), str):
        return HookResult.rewrite({"prompt": data["prompt"]})
    if isinstance(context, str) and context and point in ("PostToolUse", "UserPromptSubmit"):
        return HookResult.add_context(context[:_MAX_REASON])
    return HookResult.cont()


def _minimal_env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


def load_shell_hooks(
    registry: HookRegistry,
    config: Mapping[str, Any],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Register the ``[hooks]`` table of config.toml; returns how many hooks were added.

    ``env`` replaces the minimal default environment (PATH, HOME, LANG, LC_ALL, TMPDIR).

    Raises:
        ConfigError: an unknown point, or an entry without a ``command`` string.
    """
    base_env = dict(env) if env is not None else _minimal_env()
    count = 0
    for point, entries in config.items():
        if point not in HOOK_POINTS:
            raise ConfigError(
                f"[hooks.{point}] is not a hook point; expected one of {', '.join(HOOK_POINTS)}."
            )
        if not isinstance(entries, list):
            raise ConfigError(f"[hooks.{point}] must be an array of tables ([[hooks.{point}]]).")
        for i, entry in enumerate(entries):
            command = entry.get("command") if isinstance(entry, Mapping) else None
            if not isinstance(command, str) or not command.strip():
                raise ConfigError(f'[[hooks.{point}]] entry {i + 1} needs command = "...".')
            timeout = entry.get("timeout", 10)
            if not isinstance(timeout, int | float) or timeout <= 0:
                raise ConfigError(f"[[hooks.{point}]] entry {i + 1}: timeout must be > 0 seconds.")
            hook = ShellHook(point=point, command=command, cwd=cwd, env=base_env)
            registry.register(point, hook, matcher=entry.get("matcher"), timeout=float(timeout))
            count += 1
    return count
