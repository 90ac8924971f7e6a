"""Check 1 — session scope: the tool exists in this step's plan and the session may use it."""

from __future__ import annotations

from geode.executor.decisions import Allow, Deny
from geode.policy import SessionScope
from geode.tools.plan import BoundToolPlan

__all__ = ["check_scope"]

_MAX_LISTED = 40


def check_scope(name: str, *, scope: SessionScope, plan: BoundToolPlan) -> Allow | Deny:
    """Deny a tool outside the session's scope or not offered in the bound plan.

    The plan is projected from the scope already, so the model never saw a denied tool;
    this re-check holds even for a stale or hand-built plan.
    """
    refusal = scope.refusal(name)
    if refusal is not None:
        return Deny("scope", refusal)
    if name not in plan:
        names = plan.names()
        listed = ", ".join(names[:_MAX_LISTED]) + (", ..." if len(names) > _MAX_LISTED else "")
        return Deny("scope", f"unknown tool '{name}'; tools available: {listed or 'none'}")
    return Allow()
