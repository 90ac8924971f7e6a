"""What the loop needs from the rest of the harness, as Protocols.

The loop owns the turn; these are the seams where the executor (tool boundary), the
durable records and observation plug in. Implementations live in ``geode.executor``,
``geode.store``, ``geode.hooks`` and ``geode.daemon.spend``; tests may supply their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from geode.loop.events import ObservedLoopEvent
from geode.messages import Message, ToolResultBlock, ToolUseBlock, Usage
from geode.tools.plan import BoundToolPlan

if TYPE_CHECKING:
    # geode.hooks imports this module (its registry's PromptDecision): type-only here
    from geode.hooks.events import ObservedEvent
    from geode.providers.base import ModelRequest

__all__ = [
    "BatchSaveFailed",
    "Checkpointer",
    "CountsHumanWait",
    "Observer",
    "PromptDecision",
    "PromptGate",
    "SpendGate",
    "SpendRefusal",
    "ToolRunner",
    "TurnInfo",
    "Verifier",
    "VerifyOutcome",
]


@dataclass(frozen=True, kw_only=True)
class TurnInfo:
    """Identity of the step a tool batch belongs to."""

    session_id: str
    turn_id: str
    round: int
    correlation_id: str
    mode: str


@runtime_checkable
class ToolRunner(Protocol):
    """Phase 4's executor: runs one proposed batch through every check, in order.

    Must return exactly one ToolResultBlock per call, in call order. Denials are
    ``is_error`` results naming the check that denied; nothing raises for a denial.
    """

    async def run_batch(
        self, calls: Sequence[ToolUseBlock], *, turn: TurnInfo, plan: BoundToolPlan
    ) -> list[ToolResultBlock]: ...


@runtime_checkable
class CountsHumanWait(Protocol):
    """An optional ability of a :class:`ToolRunner`: it knows how long its batches waited
    for a person (a channel's approvers), which is not the turn's working time.

    Checked once, when the run's dependencies are built (:attr:`RunDeps.human_wait`), never
    asked for by name at each call.
    """

    def take_human_wait(self) -> float:
        """Seconds waited for a person since the last call (and reset to zero)."""
        ...


class BatchSaveFailed(Exception):
    """Raised by a Checkpointer when the proposed batch could not be saved: nothing runs."""


@runtime_checkable
class Checkpointer(Protocol):
    """The checkpoint chain of one session (durable records issue).

    ``save`` stores messages + loop state + guard counters. ``save_batch_proposed`` is
    called after the assistant's tool_use message is appended and **before** any tool of
    it runs; raising :class:`BatchSaveFailed` there means nothing runs.
    """

    async def save(
        self, *, messages: Sequence[Message], state: dict[str, Any], status: str
    ) -> None: ...

    async def save_batch_proposed(
        self, *, messages: Sequence[Message], state: dict[str, Any], turn: TurnInfo
    ) -> None: ...


@dataclass(frozen=True)
class VerifyOutcome:
    passed: bool
    reason: str = ""
    #: set when the verifier could not decide (e.g. its judge failed): a verify error, never
    #: a pass and no repair round; the turn ends ``verification_failed`` with it
    error: str = ""


@runtime_checkable
class Verifier(Protocol):
    """Checks a stop proposal (a text-only answer). Failing asks for a repair round."""

    async def verify(
        self, *, text: str, messages: Sequence[Message], turn: TurnInfo
    ) -> VerifyOutcome: ...


@dataclass(frozen=True)
class PromptDecision:
    """A UserPromptSubmit outcome: go on (maybe with a rewritten prompt) or block."""

    blocked: bool = False
    reason: str = ""
    prompt: str | None = None


@runtime_checkable
class PromptGate(Protocol):
    async def __call__(self, prompt: str, turn: TurnInfo) -> PromptDecision: ...


@dataclass(frozen=True, kw_only=True)
class SpendRefusal:
    """A spend cap that is reached: the model call is not made, the turn ends with
    ``message`` (it names the cap, the amount used and when it resets)."""

    cap: str
    scope: str
    used: float
    limit: float
    resets_at: str
    message: str


@runtime_checkable
class SpendGate(Protocol):
    """Spend caps, checked before every model call against a durable usage ledger."""

    async def check(
        self, *, turn: TurnInfo, turn_cost_usd: float, request: ModelRequest | None = None,
        price_per_mtok: tuple[float, float] | None = None,
    ) -> SpendRefusal | None:
        """None when the call may start: the most ``request`` can spend (its input estimate
        + its ``max_tokens``, at ``price_per_mtok``) is then held for it until
        :meth:`record` or :meth:`release`. The refusal (already recorded) otherwise."""
        ...

    async def release(self, *, turn: TurnInfo, spent: bool) -> None:
        """The call :meth:`check` admitted ended without a usage figure: its hold is dropped
        (``spent`` False: the provider refused it) or counted in full (``spent`` True: it
        may have been billed, e.g. a timeout)."""
        ...

    async def record(
        self, *, turn: TurnInfo, model: str, usage: Usage, cost_usd: float | None
    ) -> None:
        """One finished call's usage (``cost_usd`` None: the model has no price)."""
        ...


@runtime_checkable
class Observer(Protocol):
    """Receives lifecycle events, all typed; it decides nothing and its failures are
    swallowed.

    ``loop_event`` takes a loop event of one session (the driver's stream and the
    observer-only model call events); ``publish`` any other typed event: the executor's or the
    spend control's (:mod:`geode.hooks.events`), or another package's (the chat layer's).
    """

    def loop_event(self, session_id: str, event: ObservedLoopEvent, /) -> None: ...

    def publish(self, event: ObservedEvent, /) -> None: ...
