"""The agent loop: one user turn in six phases (input, call, model, tools, observe, finish)."""

from geode.loop.agent_loop import AgenticLoop, TurnResult
from geode.loop.events import EventSink, LoopEvent, model_wait_text
from geode.loop.protocols import (
    BatchSaveFailed,
    Checkpointer,
    Observer,
    PromptDecision,
    PromptGate,
    SpendGate,
    SpendRefusal,
    ToolRunner,
    TurnInfo,
    Verifier,
    VerifyOutcome,
)
from geode.loop.snapshot import StepSnapshot
from geode.loop.state import LoopLimits, RunDeps, RunState
from geode.loop.termination import SUCCESS_REASONS, TerminationReason

__all__ = [
    "SUCCESS_REASONS",
    "AgenticLoop",
    "BatchSaveFailed",
    "Checkpointer",
    "EventSink",
    "LoopEvent",
    "LoopLimits",
    "Observer",
    "PromptDecision",
    "PromptGate",
    "RunDeps",
    "RunState",
    "SpendGate",
    "SpendRefusal",
    "StepSnapshot",
    "TerminationReason",
    "ToolRunner",
    "TurnInfo",
    "TurnResult",
    "Verifier",
    "VerifyOutcome",
    "model_wait_text",
]
