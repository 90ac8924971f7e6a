"""StepSnapshot: what one provider call is pinned to."""

from __future__ import annotations

from dataclasses import dataclass

from geode.providers.base import BaseProvider, ModelRequest
from geode.tools.plan import BoundToolPlan

__all__ = ["StepSnapshot"]


@dataclass(frozen=True, kw_only=True)
class StepSnapshot:
    """Model, adapter, tool plan and correlation id for one provider call.

    Frozen: nothing between prepare-call and process-tools can swap the bound adapter
    or the plan; the tools dispatched are checked against *this* plan.
    """

    round: int
    model: str
    provider: BaseProvider
    plan: BoundToolPlan
    correlation_id: str
    request: ModelRequest

    @property
    def plan_ref(self) -> str:
        return f"g{self.plan.generation}:{self.plan.content_hash}"
