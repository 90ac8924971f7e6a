"""Run dependencies (immutable) and run state (mutable, checkpointed)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from geode.loop.events import EventSink
from geode.loop.protocols import (
    Checkpointer,
    CountsHumanWait,
    Observer,
    PromptGate,
    SpendGate,
    ToolRunner,
    Verifier,
)
from geode.loop.timeline import TurnTimeline
from geode.messages import Message, Usage
from geode.providers.base import BaseProvider
from geode.providers.retry import RetryPolicy
from geode.tools.plan import BoundToolPlan

__all__ = ["LoopLimits", "RunDeps", "RunState"]


@dataclass(frozen=True, kw_only=True)
class LoopLimits:
    max_rounds: int = 30
    time_budget_s: float | None = None
    cost_budget_usd: float | None = None
    #: (input, output) USD per million tokens, for the cost budget
    price_per_mtok: tuple[float, float] | None = None
    context_window: int = 200_000
    #: compact when the estimate passes this share of the window
    compact_at: float = 0.8
    keep_recent: int = 8
    #: the same call (tool + arguments) failing with the same error this many rounds in a
    #: row ends the turn (``repeated_errors``); the model is told once, the round before
    repeated_error_limit: int = 5
    #: this many rounds in a row in which every call failed, whatever the calls, end it too
    max_error_rounds: int = 20
    repair_budget: int = 2
    max_tokens: int = 8192
    #: one model call, retries and their waits included, ends after this many seconds
    model_call_deadline_s: float | None = 300.0
    #: a ``model_waiting`` event after this many seconds without a sign from the model,
    #: and again every as many seconds (None: never)
    waiting_notice_s: float | None = 5.0
    #: how many times an interrupted turn is resumed before it is ended instead
    recovery_limit: int = 3


@dataclass(frozen=True, kw_only=True)
class RunDeps:
    """What a turn runs with; fixed for the whole turn (the plan source may refresh)."""

    session_id: str
    mode: str
    model: str
    provider: BaseProvider
    plan_source: Callable[[], BoundToolPlan]
    runner: ToolRunner
    system_prompt: Callable[[], str]
    limits: LoopLimits = field(default_factory=LoopLimits)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    checkpointer: Checkpointer | None = None
    verifier: Verifier | None = None
    prompt_gate: PromptGate | None = None
    observer: Observer | None = None
    #: spend caps, checked before every model call (None: no caps, no usage ledger)
    spend: SpendGate | None = None
    on_event: EventSink | None = None
    stream: bool = False
    #: the turn's timeline rows (turn, model calls, proposals, verify); None: not recorded
    timeline: TurnTimeline | None = None
    #: ``runner`` when it counts the time its batches waited for a person (its optional
    #: ability, checked here once); None: it does not
    human_wait: CountsHumanWait | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        # frozen: the one derived field is set once, here, from the runner given
        runner = self.runner
        object.__setattr__(self, "human_wait",
                           runner if isinstance(runner, CountsHumanWait) else None)


@dataclass(kw_only=True)
class RunState:
    """Everything a checkpoint restores: messages plus loop counters."""

    messages: list[Message] = field(default_factory=list)
    turn_id: str = ""
    round: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    repair_attempts: int = 0
    error_streak: dict[str, int] = field(default_factory=dict)
    #: consecutive rounds in which every tool call failed (the no-progress bound)
    error_rounds: int = 0
    #: guard keys the model was already warned about (told once)
    guard_noted: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    #: monotonic start; a resumed turn's is moved back by the time it used before
    started_at: float = field(default_factory=time.monotonic)
    last_text: str = ""
    #: how many times this turn was resumed after an interruption (crash, restart)
    recoveries: int = 0

    def elapsed_s(self) -> float:
        """Time the turn has run, summed over its runs (downtime between them excluded)."""
        return time.monotonic() - self.started_at

    def guard_state(self) -> dict[str, Any]:
        """The counters saved with each checkpoint (messages are saved separately)."""
        return {
            "turn_id": self.turn_id,
            "round": self.round,
            "usage": self.usage.model_dump(),
            "cost_usd": self.cost_usd,
            "repair_attempts": self.repair_attempts,
            "error_streak": dict(self.error_streak),
            "error_rounds": self.error_rounds,
            "guard_noted": list(self.guard_noted),
            "tool_calls": list(self.tool_calls),
            "elapsed_s": round(self.elapsed_s(), 3),
            "recoveries": self.recoveries,
        }

    def apply_guard_state(self, data: dict[str, Any]) -> None:
        """Replacement semantics: missing fields reset to their defaults."""
        self.turn_id = str(data.get("turn_id", ""))
        self.round = int(data.get("round", 0))
        self.usage = Usage.model_validate(data.get("usage") or {})
        self.cost_usd = float(data.get("cost_usd", 0.0))
        self.repair_attempts = int(data.get("repair_attempts", 0))
        self.error_streak = dict(data.get("error_streak") or {})
        self.error_rounds = int(data.get("error_rounds", 0))
        self.guard_noted = list(data.get("guard_noted") or [])
        self.tool_calls = list(data.get("tool_calls") or [])
        # The time budget counts what the turn used before: its clock restarts back-dated.
        self.started_at = time.monotonic() - max(0.0, float(data.get("elapsed_s", 0.0)))
        self.recoveries = int(data.get("recoveries", 0))
