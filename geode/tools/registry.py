"""ToolRegistry: every tool the process knows, and the per-session plans projected from it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from geode.errors import ConfigError
from geode.policy import SessionScope
from geode.tools.base import ToolDef
from geode.tools.plan import BoundToolPlan

__all__ = ["DuplicateToolError", "ToolRegistry"]


class DuplicateToolError(ConfigError):
    """Two tools (built-in, MCP, user) claim the same name."""

    def __init__(self, name: str, *, existing: str, new: str) -> None:
        super().__init__(
            f"Tool name {name!r} is registered twice ({existing} and {new}). "
            "Rename one (MCP tools are NAME__TOOL, so rename the server) or drop it."
        )
        self.name = name


class ToolRegistry:
    """All registered tools by name. Sessions never dispatch from here, only from a plan."""

    def __init__(self, tools: Iterable[ToolDef] = ()) -> None:
        self._tools: dict[str, ToolDef] = {}
        for t in tools:
            self.register(t)

    def register(self, tool: ToolDef) -> ToolDef:
        """Add ``tool``; returns it (usable as a decorator on a ToolDef)."""
        existing = self._tools.get(tool.name)
        if existing is not None:
            raise DuplicateToolError(tool.name, existing=existing.source, new=tool.source)
        self._tools[tool.name] = tool
        return tool

    def unregister(self, name: str) -> None:
        """Remove ``name`` (e.g. an MCP server went away); plans already bound keep it."""
        self._tools.pop(name, None)

    def get(self, name: str) -> ToolDef | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolDef]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def project(self, scope: SessionScope, generation: int = 1) -> BoundToolPlan:
        """The plan a session's model sees: only tools its scope permits.

        Denied and non-allow-listed tools are left out so the model never even sees them;
        the executor still checks the scope on every dispatch.
        """
        return BoundToolPlan.build(
            (t for t in self._tools.values() if scope.permits(t.name)), generation=generation
        )
