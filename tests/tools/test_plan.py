"""BoundToolPlan content hashes: the same tools keep a plan, any visible change makes a new one."""

from __future__ import annotations

import dataclasses

from geode.tools.builtin import builtin_tools
from geode.tools.plan import BoundToolPlan


def test_same_content_keeps_the_plan_and_any_change_makes_a_new_one() -> None:
    tools = builtin_tools()
    plan = BoundToolPlan.build(tools)
    assert plan.refreshed(list(reversed(tools))) is plan  # order does not matter
    # Equal content in new objects (a re-listed MCP server): still the same plan.
    assert plan.refreshed([dataclasses.replace(t) for t in tools]) is plan
    first = tools[0]
    for change in ({"description": first.description + "!"},
                   {"input_schema": {**first.input_schema, "title": "changed"}},
                   {"safety": "dangerous" if first.safety != "dangerous" else "read_only"}):
        changed = [dataclasses.replace(first, **change), *tools[1:]]  # type: ignore[arg-type]
        newer = plan.refreshed(changed)
        assert newer is not plan and newer.generation == plan.generation + 1, change
