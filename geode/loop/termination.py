"""The closed set of reasons a turn ends with."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["SUCCESS_REASONS", "TerminationReason"]


class TerminationReason(StrEnum):
    NATURAL = "natural"  # a text answer that passed verify
    MAX_ROUNDS = "max_rounds"
    TIME_BUDGET = "time_budget"
    COST_BUDGET = "cost_budget"
    CONTEXT_EXHAUSTED = "context_exhausted"
    MODEL_ERROR = "model_error"
    CANCELLED = "cancelled"
    VERIFICATION_FAILED = "verification_failed"
    INPUT_BLOCKED = "input_blocked"  # a UserPromptSubmit hook refused the prompt
    REPEATED_ERRORS = "repeated_errors"  # the same tool error again and again
    CHECKPOINT_FAILED = "checkpoint_failed"  # a save before execute failed: nothing ran
    RECOVERY_LIMIT = "recovery_limit"  # interrupted (crash/restart) too often: not resumed
    SPEND_CAP = "spend_cap"  # a [budgets] / binding spend cap was reached: no model call


SUCCESS_REASONS = frozenset({TerminationReason.NATURAL})
