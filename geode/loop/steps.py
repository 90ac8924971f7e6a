"""The typed steps of a turn; each phase returns the next one, the loop matches on it."""

from __future__ import annotations

from dataclasses import dataclass

from geode.loop.snapshot import StepSnapshot
from geode.loop.termination import TerminationReason
from geode.messages import ModelResponse, ToolResultBlock, ToolUseBlock

__all__ = ["CallModel", "Finish", "Observe", "PrepareCall", "RunTools", "Step", "Verify"]


@dataclass(frozen=True)
class PrepareCall:
    pass


@dataclass(frozen=True)
class CallModel:
    snapshot: StepSnapshot


@dataclass(frozen=True)
class RunTools:
    snapshot: StepSnapshot
    response: ModelResponse


@dataclass(frozen=True)
class Observe:
    results: tuple[ToolResultBlock, ...]
    #: the calls the results answer, in the same order (the guard keys on them)
    calls: tuple[ToolUseBlock, ...] = ()


@dataclass(frozen=True)
class Verify:
    text: str


@dataclass(frozen=True)
class Finish:
    reason: TerminationReason
    text: str = ""
    detail: str = ""


Step = PrepareCall | CallModel | RunTools | Observe | Verify | Finish
