"""BoundToolPlan: the immutable set of tools visible for one step.

The model sees exactly the tools of the plan bound to its step, and only those can be
dispatched. A plan is projected per session (mode, channel allow-list, provider) from the
registry; a refresh (e.g. MCP tools changed) produces a new plan with the next
generation number, which only the *next* step binds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from geode.messages import ToolSpec
from geode.tools.base import ToolDef

__all__ = ["BoundToolPlan"]


@dataclass(frozen=True, eq=False)
class BoundToolPlan:
    generation: int
    tools: Mapping[str, ToolDef]
    content_hash: str = field(default="")

    @classmethod
    def build(cls, tools: Iterable[ToolDef], *, generation: int = 1) -> BoundToolPlan:
        by_name: dict[str, ToolDef] = {}
        for t in tools:
            if t.name in by_name:
                raise ValueError(f"duplicate tool name in plan: {t.name}")
            by_name[t.name] = t
        ordered = dict(sorted(by_name.items()))
        # The JSON list of the tools' fingerprints (each cached on its tool).
        listing = "[" + ", ".join(t.fingerprint for t in ordered.values()) + "]"
        digest = hashlib.sha256(listing.encode()).hexdigest()[:16]
        return cls(generation=generation, tools=MappingProxyType(ordered), content_hash=digest)

    def get(self, name: str) -> ToolDef | None:
        return self.tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.tools

    def __len__(self) -> int:
        return len(self.tools)

    def names(self) -> list[str]:
        return list(self.tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(
            ToolSpec(name=t.name, description=t.description, input_schema=t.input_schema)
            for t in self.tools.values()
        )

    def refreshed(self, tools: Iterable[ToolDef]) -> BoundToolPlan:
        """A new plan for the next step; this one is unchanged."""
        new = BoundToolPlan.build(tools, generation=self.generation + 1)
        if new.content_hash == self.content_hash:
            return self
        return new
