"""Check 2 — trusted request middleware, which may rewrite a call but not downgrade it.

Middleware is host code (rate limiters, argument normalisers, tenant routing). It gets a
private copy of the call and returns the call to continue with (the same or a rewritten
one) or a :class:`Deny`. A rewrite may not change the call id, leave the session's scope, or
lower the tool's safety level or personal-data category: classification decides the later
checks, so lowering it would be a way around them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import structlog

from geode.executor._scope import check_scope
from geode.executor.decisions import Deny, ToolCall
from geode.loop.protocols import TurnInfo
from geode.policy import SessionScope
from geode.tools.base import PERSONAL_ORDER, SAFETY_ORDER, ToolDef
from geode.tools.plan import BoundToolPlan

__all__ = ["MIDDLEWARE_TIMEOUT_S", "RequestMiddleware", "apply_middleware", "lowered"]

log = structlog.get_logger(__name__)

MIDDLEWARE_TIMEOUT_S = 10.0


@runtime_checkable
class RequestMiddleware(Protocol):
    """Trusted host code run on every call before policy; returns the call to continue with."""

    async def __call__(self, call: ToolCall, *, turn: TurnInfo) -> ToolCall | Deny: ...


def lowered(before: ToolDef, after: ToolDef) -> str | None:
    """Why rewriting a call of ``before`` into ``after`` lowers its classification, or None."""
    if SAFETY_ORDER[after.safety] < SAFETY_ORDER[before.safety]:
        return (
            f"a rewrite of '{before.name}' ({before.safety}) into '{after.name}' "
            f"({after.safety}) would lower the safety level"
        )
    if PERSONAL_ORDER[after.personal_data] < PERSONAL_ORDER[before.personal_data]:
        return (
            f"a rewrite of '{before.name}' ({before.personal_data} data) into '{after.name}' "
            f"({after.personal_data} data) would lower the personal-data category"
        )
    return None


def _name(mw: object) -> str:
    return str(getattr(mw, "__qualname__", None) or type(mw).__qualname__)


async def apply_middleware(
    call: ToolCall,
    *,
    middleware: Sequence[RequestMiddleware],
    turn: TurnInfo,
    scope: SessionScope,
    plan: BoundToolPlan,
) -> ToolCall | Deny:
    """Run each middleware in order; the call must already be in scope (check 1)."""
    current = call
    for mw in middleware:
        before = plan.tools[current.name]
        try:
            out = await asyncio.wait_for(mw(current.rewritten(), turn=turn), MIDDLEWARE_TIMEOUT_S)
        except TimeoutError:
            return Deny("middleware", f"request middleware {_name(mw)} timed out")
        except Exception as exc:  # host code failing closes the gate; the call does not run
            log.warning("request middleware failed", middleware=_name(mw), exc_info=True)
            failed = f"failed ({type(exc).__name__})"
            return Deny("middleware", f"request middleware {_name(mw)} {failed}")
        if isinstance(out, Deny):
            return Deny("middleware", out.reason)
        if not isinstance(out, ToolCall):
            wrong = f"returned {type(out).__name__}, not a ToolCall"
            return Deny("middleware", f"request middleware {_name(mw)} {wrong}")
        if out.id != call.id:
            return Deny("middleware", f"request middleware {_name(mw)} changed the call id")
        if out.name != current.name:
            in_scope = check_scope(out.name, scope=scope, plan=plan)
            if isinstance(in_scope, Deny):
                return Deny("middleware", f"rewrite to '{out.name}' refused: {in_scope.reason}")
            downgrade = lowered(before, plan.tools[out.name])
            if downgrade is not None:
                return Deny("middleware", f"{downgrade}; refused")
        current = out.rewritten()  # our own copy: the middleware keeps no handle on it
    return current
