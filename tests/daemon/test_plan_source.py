"""A session's tool plan (``PlanSource``): built once for the same tools, shared by new
sessions, and a new generation when the tools change."""

from __future__ import annotations

import gc
import weakref

from geode.daemon.builders.tools import PlanSource
from geode.policy import session_scope
from geode.tools.base import ToolDef
from geode.tools.builtin import builtin_tools
from geode.tools.registry import ToolRegistry


def _registry() -> ToolRegistry:
    reg = ToolRegistry()
    for t in builtin_tools():
        reg.register(t)
    return reg


def test_sessions_share_the_first_plan_and_a_change_is_a_new_generation():
    reg = _registry()
    scope = session_scope("DAEMON")
    first: dict = {}
    a = PlanSource(reg, [], scope, first_plans=first)
    b = PlanSource(reg, [], scope, first_plans=first)
    plan = a()
    assert a() is plan and b() is plan  # the same tools: the same plan, no rebuild
    assert plan.generation == 1
    extra = ToolDef(name="zz_extra", description="one more", input_schema={"type": "object"},
                    handler=lambda args, ctx: "ok", safety="read_only")
    c = PlanSource(reg, [extra], scope, first_plans=first)
    other = c()
    assert other is not plan and "zz_extra" in other  # other tools: their own plan
    assert b() is plan
    # a session whose tools change mid-way (MCP refreshed): the next generation
    a.extra = [extra]
    newer = a()
    assert newer.generation == plan.generation + 1 and "zz_extra" in newer
    assert a() is newer


def test_a_memoised_plan_keeps_its_tools_alive_so_their_ids_name_them():
    """The memo is keyed by the tools' ids: an id names its object only while it lives, so
    the memo must keep every tool of a key alive (its plan holds them)."""
    reg = _registry()
    scope = session_scope("DAEMON")
    first: dict = {}

    def tool() -> ToolDef:
        return ToolDef(name="zz_tmp", description="temporary",
                       input_schema={"type": "object"}, handler=lambda args, ctx: "ok",
                       safety="read_only")

    t = tool()
    alive = weakref.ref(t)
    src = PlanSource(reg, [t], scope, first_plans=first)
    src()
    del src, t
    gc.collect()
    assert alive() is not None  # held by the memo's plan: its id cannot be taken
    fresh = tool()
    assert PlanSource(reg, [fresh], scope, first_plans=first)().get("zz_tmp") is fresh
    first.clear()
    gc.collect()
    assert alive() is None  # out of the memo, the tool goes
