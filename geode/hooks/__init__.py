"""Hooks: decision hooks that may block or rewrite (``HookRegistry``), shell-command hooks
from config (``load_shell_hooks``), and observation hooks that decide nothing (``HookSystem``).
"""

from geode.hooks.registry import (
    HOOK_POINTS,
    HookEvent,
    HookFn,
    HookPoint,
    HookPromptGate,
    HookRegistry,
    HookResult,
    PostToolOutcome,
    PreToolOutcome,
    PromptOutcome,
    load_entry_point_hooks,
)
from geode.hooks.shell import HookCommandError, ShellHook, load_shell_hooks
from geode.hooks.system import EventObserverFn, HookSystem, LoopObserverFn, ObserverFn

__all__ = [
    "HOOK_POINTS",
    "EventObserverFn",
    "HookCommandError",
    "HookEvent",
    "HookFn",
    "HookPoint",
    "HookPromptGate",
    "HookRegistry",
    "HookResult",
    "HookSystem",
    "LoopObserverFn",
    "ObserverFn",
    "PostToolOutcome",
    "PreToolOutcome",
    "PromptOutcome",
    "ShellHook",
    "load_entry_point_hooks",
    "load_shell_hooks",
]
