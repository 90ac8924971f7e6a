"""MCP both ways: a client manager for external tool servers, and GEODE as an MCP server.

- :class:`MCPServerManager` runs the configured servers (global config, ``--mcp-config``
  files, a *trusted* project's ``.geode/config.toml``) and offers their tools to sessions
  as ``SERVER__TOOL`` ToolDefs that pass every executor check.
- ``geode mcp serve`` (:mod:`geode.mcp.server`) exposes ``run_agent`` and read-only session
  tools to MCP hosts (Claude Desktop, Claude Code, ...).
- ``geode trust`` (:mod:`geode.mcp.trust`) records the project MCP sections allowed to run.
"""

from geode.mcp.config import ServerConfig, ServerPolicy, ToolPolicy
from geode.mcp.manager import MCPOutcomeUnknown, MCPServerManager

__all__ = ["MCPOutcomeUnknown", "MCPServerManager", "ServerConfig", "ServerPolicy", "ToolPolicy"]
