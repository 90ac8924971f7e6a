"""A runner's optional abilities are Protocols checked once, when the run's dependencies are
built: a runner that counts the time its batches waited for a person has that time kept out
of the turn's time budget; a runner without the ability is never asked for it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from geode.loop import (
    AgenticLoop,
    CountsHumanWait,
    LoopLimits,
    RunDeps,
    TerminationReason,
    TurnInfo,
)
from geode.messages import ToolResultBlock, ToolUseBlock
from geode.providers.retry import RetryPolicy
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.tools.base import ToolContext, tool
from geode.tools.plan import BoundToolPlan


@tool
async def ask(ctx: ToolContext) -> str:
    """Ask a person."""
    return "yes"


PLAN = BoundToolPlan.build([ask])


class Runner:
    """Each batch waits ``wait_s`` for a person (really sleeps), then answers."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self.waited = 0.0

    async def run_batch(
        self, calls: Sequence[ToolUseBlock], *, turn: TurnInfo, plan: BoundToolPlan
    ) -> list[ToolResultBlock]:
        began = time.monotonic()
        await asyncio.sleep(self.wait_s)
        self.waited += time.monotonic() - began
        return [ToolResultBlock.text(c.id, "yes") for c in calls]


class CountingRunner(Runner):
    def __init__(self, wait_s: float) -> None:
        super().__init__(wait_s)
        self.asked = 0

    def take_human_wait(self) -> float:
        self.asked += 1
        waited, self.waited = self.waited, 0.0
        return waited


def _deps(runner: Runner, *, rounds: int, time_budget_s: float) -> RunDeps:
    script = [*(ToolCall("ask", {}) for _ in range(rounds)), "done"]
    return RunDeps(session_id="s", mode="HEADLESS", model="scripted",
                   provider=ScriptedProvider(script), plan_source=lambda: PLAN,
                   runner=runner, system_prompt=lambda: "system",
                   limits=LoopLimits(time_budget_s=time_budget_s),
                   retry=RetryPolicy(max_attempts=1))


def test_the_ability_is_found_once_when_the_deps_are_built() -> None:
    counting, plain = CountingRunner(0), Runner(0)
    assert isinstance(counting, CountsHumanWait)
    assert _deps(counting, rounds=1, time_budget_s=10).human_wait is counting
    assert _deps(plain, rounds=1, time_budget_s=10).human_wait is None


async def test_a_persons_wait_is_not_the_turns_working_time() -> None:
    # three batches each waiting 0.4 s for a person: 1.2 s in all, over a 0.8 s budget
    runner = CountingRunner(0.4)
    result = await AgenticLoop(deps=_deps(runner, rounds=3, time_budget_s=0.8)).run("go")
    assert result.termination == TerminationReason.NATURAL, result.detail
    assert runner.asked == 3  # once after each batch


async def test_a_runner_without_the_ability_counts_all_time_and_is_never_asked() -> None:
    runner = Runner(0.4)
    deps = _deps(runner, rounds=3, time_budget_s=0.8)
    # given after the deps were built: not looked up by name during the turn
    runner.take_human_wait = lambda: 100.0  # type: ignore[attr-defined]
    result = await AgenticLoop(deps=deps).run("go")
    assert result.termination == TerminationReason.TIME_BUDGET
