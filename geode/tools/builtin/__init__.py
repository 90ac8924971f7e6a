"""GEODE's built-in tools.

File tools are confined to the session's workspace; ``run_bash`` runs only inside a
bubblewrap sandbox; ``web_fetch`` reaches only public addresses; ``computer`` drives an X
display. Handlers refuse by raising :class:`geode.tools.errors.ToolFailure`.
"""

from __future__ import annotations

from geode.tools.base import ToolDef
from geode.tools.builtin._sandbox import SandboxLimits
from geode.tools.builtin._workspace import own_inodes, path_key, resolve_in_workspace
from geode.tools.builtin.bash import make_run_bash, run_bash, sandbox_available
from geode.tools.builtin.desktop import computer
from geode.tools.builtin.files import (
    edit_file,
    glob,
    grep,
    list_dir,
    read_file,
    read_workspace_bytes,
    write_file,
)
from geode.tools.builtin.results import read_result
from geode.tools.builtin.web_fetch import web_fetch

__all__ = [
    "BUILTIN_TOOLS",
    "SandboxLimits",
    "builtin_tools",
    "computer",
    "edit_file",
    "glob",
    "grep",
    "list_dir",
    "make_run_bash",
    "own_inodes",
    "path_key",
    "read_file",
    "read_result",
    "read_workspace_bytes",
    "resolve_in_workspace",
    "run_bash",
    "sandbox_available",
    "web_fetch",
    "write_file",
]

BUILTIN_TOOLS: tuple[ToolDef, ...] = (
    read_file,
    write_file,
    edit_file,
    list_dir,
    glob,
    grep,
    run_bash,
    web_fetch,
    computer,
    read_result,
)


def builtin_tools() -> list[ToolDef]:
    """A fresh list of every built-in tool (callers may filter or extend it)."""
    return list(BUILTIN_TOOLS)
