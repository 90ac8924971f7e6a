"""Tool names given by a person (``--allow-tool``, ``--deny-tool``, a binding's ``tools``)
are checked where they come in: a misspelt name would otherwise deny or allow nothing,
silently."""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable

from geode.errors import ConfigError

__all__ = ["MCP_SEPARATOR", "OPTIONAL_TOOL_NAMES", "channel_tool_names", "check_tool_names",
           "known_tool_names"]

#: an MCP tool is ``SERVER__TOOL`` to the model (CONTRACT.md)
MCP_SEPARATOR = "__"


def channel_tool_names() -> frozenset[str]:
    """Tools only a channel session has (the channel layer adds them to its sessions), as
    each registered platform's spec declares them (:mod:`geode.platforms`)."""
    from geode.platforms import platform_infos

    return frozenset[str]().union(*(info.chat_tools for info in platform_infos()))


def check_tool_names(
    names: Iterable[str], *, known: Collection[str], mcp_servers: Collection[str] = (),
    what: str,
) -> None:
    """Raise :class:`ConfigError` naming the first unknown tool and its close matches.

    An MCP tool cannot be checked before its server runs: ``SERVER__TOOL`` passes when
    SERVER is a configured MCP server.

    Args:
        names: the names given.
        known: the tools that exist (built-in and extra tools).
        mcp_servers: names of the configured MCP servers.
        what: where the names came from, for the message (``--allow-tool``).
    """
    for name in names:
        if name in known:
            continue
        server, sep, _ = name.partition(MCP_SEPARATOR)
        if sep and server in mcp_servers:
            continue
        candidates = [*known, *(f"{s}{MCP_SEPARATOR}" for s in mcp_servers)]
        close = difflib.get_close_matches(name, candidates, n=3)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        servers = (f"; MCP tools are SERVER{MCP_SEPARATOR}TOOL for a configured server "
                   f"({', '.join(sorted(mcp_servers))})" if mcp_servers else "")
        raise ConfigError(
            f"{what}: unknown tool {name!r}.{hint} Tools: {', '.join(sorted(known))}{servers}."
        )


#: built-in tools a session has only when configured: ``web_search`` (``[search]``),
#: ``skill`` (skills installed) and ``memory`` (a binding's ``memory``); a binding may name
#: them before they are
OPTIONAL_TOOL_NAMES = frozenset({"web_search", "skill", "memory"})


def known_tool_names() -> set[str]:
    """The built-in tools (:data:`OPTIONAL_TOOL_NAMES` too), the channel-only tools
    (:func:`channel_tool_names`) and the names the mode policies deny (``delegate_task``)."""
    from geode.policy import MODE_POLICIES
    from geode.tools.builtin import builtin_tools

    names = {t.name for t in builtin_tools()} | channel_tool_names() | OPTIONAL_TOOL_NAMES
    names.update(*(p.denied_tools for p in MODE_POLICIES.values()))
    return names
