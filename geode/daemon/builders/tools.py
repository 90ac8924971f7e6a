"""The tools of a session: its scope, its executor with the tools' typed dependencies, and
the plan source that projects its tool plan each step.

The registry (built-ins, or the tools a caller gives) and the resource locks are the
process's; a session adds its own tools (a channel's ``send_file``) and the MCP servers' live
tools. What a built-in tool needs (GEODE's own files, the sandbox's limits, a computer-use
display, the kept results) reaches it as :class:`~geode.tools.deps.ToolDeps`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from geode.executor import Approver, ResourceLocks, ToolExecutor
from geode.policy import MODE_POLICIES, Mode, SessionScope, session_scope
from geode.tools.base import ToolDef
from geode.tools.deps import SandboxLimits, ToolDeps
from geode.tools.names import check_tool_names
from geode.tools.plan import BoundToolPlan
from geode.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from geode.daemon.builders.checkpointing import Records
    from geode.daemon.port_values import SessionOverrides
    from geode.hooks import HookRegistry, HookSystem
    from geode.mcp.manager import MCPServerManager
    from geode.memory import SessionMemory
    from geode.rewind import PreImageRecorder
    from geode.search import WebSearchClient
    from geode.settings import Settings
    from geode.skills import OfferedSkills

__all__ = ["PlanSource", "ToolsBuilder"]

#: first-generation plans kept for new sessions (distinct tool sets seen)
_MAX_FIRST_PLANS = 32


class ToolsBuilder:
    """Builds each session's scope, executor and plan source; one per process."""

    def __init__(
        self,
        *,
        settings: Settings,
        tools: Sequence[ToolDef],
        hooks: HookRegistry,
        observers: HookSystem,
        mcp: MCPServerManager | None = None,
        search: WebSearchClient | None = None,
    ) -> None:
        """``search``: the ``[search]`` backend; given, ``web_search`` is registered too."""
        self.settings = settings
        self.hooks = hooks
        self.observers = observers
        self.mcp = mcp
        self.search = search
        self.registry = ToolRegistry()
        for t in tools:
            self.registry.register(t)
        if search is not None and "web_search" not in self.registry:
            from geode.tools.builtin.web_search import web_search

            self.registry.register(web_search)
        #: resource locks shared by every session of the process (a file, a host)
        self.locks = ResourceLocks()
        #: sessions' first tool plans (:class:`PlanSource`)
        self._first_plans: dict[tuple[int, ...], BoundToolPlan] = {}

    def scope(
        self, *, mode: Mode, overrides: SessionOverrides, allow_tools: Sequence[str] = (),
        deny_tools: Sequence[str] = (), extra_tools: Sequence[ToolDef] = (),
    ) -> SessionScope:
        """The session's scope; a name in ``allow_tools`` / ``deny_tools`` (flags a person
        typed) that names no tool is a ConfigError."""
        known = {t.name for t in (*self.registry, *extra_tools)}
        known.update(*(p.denied_tools for p in MODE_POLICIES.values()))  # delegate_task
        servers = self.mcp.servers if self.mcp is not None else ()
        # a binding's list is checked where it is written (`geode bindings add`, `geode
        # serve` reading config.toml), not at every turn
        check_tool_names(allow_tools, known=known, mcp_servers=servers, what="--allow-tool")
        check_tool_names(deny_tools, known=known, mcp_servers=servers, what="--deny-tool")
        o = overrides
        scope = session_scope(mode, channel_tools=o.tools, channel_approve=o.approve,
                              computer_use=o.computer_use, approve_actions=o.approve_actions,
                              allow_tools=allow_tools, deny_tools=deny_tools)
        if scope.allow_list is not None and any(t.name == "skill" for t in extra_tools):
            # the session was offered skills (its binding named them, or took them all):
            # opening one is part of that offer, as read_result is of a cut result
            scope = dataclasses.replace(scope, allow_list=scope.allow_list | {"skill"})
        return scope

    def skills_for(self, overrides: SessionOverrides) -> OfferedSkills:
        """The skills a session is offered: every installed one, or the ones its caller
        names (a binding's ``skills``); read from their folders now, so a skill installed or
        edited since the last session shows in the next."""
        from geode.skills import OfferedSkills, find_skills, skill_dirs

        return OfferedSkills(find_skills(skill_dirs(self.settings)).pick(overrides.skills))

    def deps(self, *, display: str | None = None, skills: OfferedSkills | None = None,
             memory: SessionMemory | None = None) -> ToolDeps:
        """The tools' dependencies for a session (``display``: a computer-use session's X
        display; ``skills``: the ones it is offered; ``memory``: what its turn remembers);
        the executor adds the kept results."""
        settled = self._settled_deps
        if not display and not skills and memory is None:
            return settled
        return dataclasses.replace(settled, display=display or None, skills=skills or None,
                                   memory=memory)

    def executor(
        self, *, scope: SessionScope, workspace: Path, approver: Approver | None,
        records: Records, max_result_chars: int, display: str | None = None,
        skills: OfferedSkills | None = None, memory: SessionMemory | None = None,
    ) -> ToolExecutor:
        """The session's tool boundary (every check, in order; see :mod:`geode.executor`)."""
        return ToolExecutor(
            scope=scope, workspace=workspace, hooks=self.hooks, observers=self.observers,
            approver=approver, receipts=records.receipts, timeline=records.timeline,
            locks=self.locks, max_result_chars=max_result_chars, results=records.results,
            deps=self.deps(display=display, skills=skills, memory=memory),
            preimages=self._preimages,
        )

    @functools.cached_property
    def _preimages(self) -> PreImageRecorder | None:
        """What rewind keeps before a call changes workspace files (``[rewind]``)."""
        if not self.settings.rewind.enabled:
            return None
        from geode.rewind import BlobStore, PreImageRecorder

        return PreImageRecorder(blobs=BlobStore(self.settings.home / "rewind"),
                                max_snapshot_mb=self.settings.rewind.max_snapshot_mb)

    async def plan_source(self, scope: SessionScope,
                          extra_tools: Sequence[ToolDef] = ()) -> PlanSource:
        """The session's plan source (its MCP servers started first: the plan reads their
        current tools)."""
        if self.mcp is not None:
            await self.mcp.tools_for(scope)
        return PlanSource(self.registry, extra_tools, scope, mcp=self.mcp,
                          first_plans=self._first_plans)

    @functools.cached_property
    def _settled_deps(self) -> ToolDeps:
        """What the tools get from the settings (fixed for the process, so built once, not
        per session): GEODE's own files (never reachable through a tool, wherever the
        workspace is) and the sandbox's limits."""
        protected = [self.settings.home]
        url = self.settings.store_url
        if url.startswith("sqlite"):
            from geode.errors import ConfigError
            from geode.store import normalize_url

            try:
                db = normalize_url(url).database
            except ConfigError:  # no database file (the store refuses such a URL itself)
                db = None
            if db:
                protected += [Path(db + suffix) for suffix in ("", "-wal", "-shm", "-journal")]
        from geode.providers.codex_auth import codex_auth_file

        # the Codex CLI login (a refresh token): GEODE reads it, so no tool may
        protected.append(codex_auth_file(self.settings.codex.home))
        return ToolDeps(protected_paths=tuple(protected),
                        sandbox_limits=SandboxLimits(**self.settings.sandbox.model_dump()),
                        search=self.search)


class PlanSource:
    """Projects the session's plan each step; unchanged content keeps its generation,
    a change (e.g. MCP tools refreshed) becomes the next generation for the next step."""

    def __init__(
        self,
        registry: ToolRegistry,
        extra: Sequence[ToolDef],
        scope: SessionScope,
        *,
        mcp: MCPServerManager | None = None,
        first_plans: dict[tuple[int, ...], BoundToolPlan] | None = None,
    ) -> None:
        """``first_plans``: the process's first-generation plans by the ids of their tools,
        shared by sessions (a new thread's session builds the same plan as the last one)."""
        self.registry = registry
        self.extra = list(extra)
        self.scope = scope
        self.mcp = mcp
        self._plan: BoundToolPlan | None = None
        self._ids: tuple[int, ...] = ()
        self._first = first_plans if first_plans is not None else {}

    def __call__(self) -> BoundToolPlan:
        live = self.mcp.current_tools(self.scope) if self.mcp is not None else []
        tools = [t for t in (*self.registry, *self.extra, *live) if self.scope.permits(t.name)]
        # The same tool objects give the same plan. An id names its object only while that
        # lives; a plan holds every tool of its key, so none of them can go meanwhile.
        ids = tuple(map(id, tools))
        if self._plan is not None and ids == self._ids:
            return self._plan
        self._ids = ids
        if self._plan is None:
            plan = self._first.get(ids)
            if plan is None:
                plan = BoundToolPlan.build(tools)
                if len(self._first) >= _MAX_FIRST_PLANS:
                    self._first.pop(next(iter(self._first)))
                self._first[ids] = plan
            self._plan = plan
        else:
            self._plan = self._plan.refreshed(tools)
        return self._plan
