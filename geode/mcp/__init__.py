"""MCP both ways: a client manager for external tool servers, and GEODE as an MCP server.

- :class:`MCPServerManager` runs the configured servers (global config, ``--mcp-config``
  files, a *trusted* project's ``.geode/config.toml``) and offers their tools to sessions
  as ``SERVER__TOOL`` ToolDefs that pass every executor check.
- ``geode mcp serve`` (:mod:`geode.mcp.server`) exposes ``run_agent`` and read-only session
  tools to MCP hosts (Claude Desktop, Claude Code, ...).
- ``geode trust`` (:mod:`geode.mcp.trust`) records the project MCP sections allowed to run.

The manager (and with it the MCP SDK, ~0.5 s of imports and ~50 MB) is imported on first
use: a process that has no MCP server configured never loads it, while reading the config
and the trust records (:mod:`geode.mcp.config`, :mod:`geode.mcp.trust`) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from geode.mcp.config import ServerConfig, ServerPolicy, ToolPolicy

if TYPE_CHECKING:
    from geode.mcp.manager import MCPOutcomeUnknown, MCPServerManager

__all__ = ["MCPOutcomeUnknown", "MCPServerManager", "ServerConfig", "ServerPolicy", "ToolPolicy"]

_LAZY = {"MCPOutcomeUnknown": "geode.mcp.manager", "MCPServerManager": "geode.mcp.manager"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
