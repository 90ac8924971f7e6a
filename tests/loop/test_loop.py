"""The six-phase loop: every termination reason is reachable, guards hold, pairs stay intact."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

import pytest

from geode.errors import ModelError
from geode.loop import (
    AgenticLoop,
    BatchSaveFailed,
    LoopLimits,
    PromptDecision,
    RunDeps,
    SpendRefusal,
    TerminationReason,
    TurnInfo,
    VerifyOutcome,
)
from geode.loop.compaction import pairs_intact
from geode.messages import Message, ToolResultBlock, ToolUseBlock, Usage
from geode.providers.retry import RetryPolicy
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.tools.base import ToolContext, tool
from geode.tools.plan import BoundToolPlan


@tool
async def echo(ctx: ToolContext, text: str) -> str:
    """Echo text."""
    return text


PLAN = BoundToolPlan.build([echo])


class Runner:
    """A minimal ToolRunner: echoes, or fails with a fixed error, recording every batch."""

    def __init__(self, *, error: str | None = None, block: asyncio.Event | None = None) -> None:
        self.batches: list[list[str]] = []
        self.plans: list[BoundToolPlan] = []
        self.error = error
        self.block = block

    async def run_batch(
        self, calls: Sequence[ToolUseBlock], *, turn: TurnInfo, plan: BoundToolPlan
    ) -> list[ToolResultBlock]:
        self.batches.append([c.name for c in calls])
        self.plans.append(plan)
        if self.block is not None:
            await self.block.wait()
        if self.error:
            return [ToolResultBlock.text(c.id, self.error, is_error=True) for c in calls]
        return [ToolResultBlock.text(c.id, str(c.input.get("text", ""))) for c in calls]


class Checkpoints:
    def __init__(self, *, fail_batch: bool = False) -> None:
        self.saves: list[tuple[str, int]] = []
        self.fail_batch = fail_batch

    async def save(
        self, *, messages: Sequence[Message], state: dict[str, Any], status: str
    ) -> None:
        self.saves.append(("save", len(messages)))

    async def save_batch_proposed(
        self, *, messages: Sequence[Message], state: dict[str, Any], turn: TurnInfo
    ) -> None:
        if self.fail_batch:
            raise BatchSaveFailed("disk full")
        self.saves.append(("batch", len(messages)))


def make_loop(script: list[Any], runner: Runner | None = None, **kw: Any) -> AgenticLoop:
    limits = kw.pop("limits", LoopLimits())
    provider = kw.pop("provider", None) or ScriptedProvider(script)
    deps = RunDeps(
        session_id="s-test",
        mode="HEADLESS",
        model="scripted",
        provider=provider,
        plan_source=lambda: PLAN,
        runner=runner or Runner(),
        system_prompt=lambda: "system",
        limits=limits,
        retry=kw.pop("retry", RetryPolicy(max_attempts=1)),
        **kw,
    )
    return AgenticLoop(deps=deps)


async def test_natural_end_after_a_tool_round() -> None:
    runner = Runner()
    provider = ScriptedProvider([ToolCall("echo", {"text": "hi"}), "done: hi"])
    loop = make_loop([], runner, provider=provider)
    result = await loop.run("say hi")
    assert result.termination == TerminationReason.NATURAL
    assert result.text == "done: hi"
    assert result.answer == "done: hi"  # the answer, a field of its own
    assert result.rounds == 2
    assert result.tool_calls == [{"name": "echo", "status": "ok"}]
    assert runner.batches == [["echo"]]
    provider.assert_complete()
    # the model saw the tool result in its second call, paired with its tool_use
    second = provider.calls[1].messages
    assert second[-1].tool_results[0].text_content == "hi"
    assert pairs_intact(second)
    assert [t.name for t in provider.calls[0].tools] == ["echo"]


async def test_max_rounds() -> None:
    loop = make_loop(
        [ToolCall("echo", {"text": str(i)}) for i in range(5)], limits=LoopLimits(max_rounds=3)
    )
    result = await loop.run("loop forever")
    assert result.termination == TerminationReason.MAX_ROUNDS
    assert result.rounds == 3
    assert not result.ok
    # no answer: the note is the CLI's text, never mistaken for an answer by a host
    assert result.answer == "" and result.text.startswith("[turn ended: max rounds]")


async def test_time_budget_during_a_slow_model_call() -> None:
    provider = ScriptedProvider(["late"], latency=5)
    loop = make_loop([], provider=provider, limits=LoopLimits(time_budget_s=0.2))
    result = await loop.run("hurry")
    assert result.termination == TerminationReason.TIME_BUDGET


async def test_repeated_identical_tool_errors_stop_the_turn() -> None:
    runner = Runner(error="boom: file is locked")
    loop = make_loop(
        [ToolCall("echo", {"text": "x"})] * 10, runner, limits=LoopLimits(repeated_error_limit=3)
    )
    result = await loop.run("try")
    assert result.termination == TerminationReason.REPEATED_ERRORS
    assert len(runner.batches) == 3
    assert "boom" in result.detail


async def test_model_error_is_classified_and_ends_the_turn() -> None:
    err = ModelError("invalid x-api-key", kind="auth", status_code=401)
    result = await make_loop([err]).run("hi")
    assert result.termination == TerminationReason.MODEL_ERROR
    assert result.detail.startswith("auth")


async def test_transient_errors_are_retried_within_the_bound() -> None:
    provider = ScriptedProvider([ModelError("x", kind="overloaded"), "ok now"])
    loop = make_loop(
        [], provider=provider, retry=RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0)
    )
    result = await loop.run("hi")
    assert result.termination == TerminationReason.NATURAL
    assert len(provider.calls) == 2


async def test_cost_budget() -> None:
    limits = LoopLimits(cost_budget_usd=0.000001, price_per_mtok=(1000.0, 1000.0))
    loop = make_loop([ToolCall("echo", {"text": "a"}), "never"], limits=limits)
    result = await loop.run("spend")
    assert result.termination == TerminationReason.COST_BUDGET
    assert result.cost_usd > 0


async def test_compaction_keeps_tool_pairs_and_the_task() -> None:
    big = "x" * 4000
    script = [ToolCall("echo", {"text": big}) for _ in range(12)] + ["finished"]
    provider = ScriptedProvider(script)
    limits = LoopLimits(context_window=12_000, compact_at=0.5, keep_recent=4, max_rounds=50)
    result = await make_loop([], provider=provider, limits=limits).run("the original task")
    assert result.termination == TerminationReason.NATURAL
    compacted = [c for c in provider.calls if "omitted" in c.messages[0].text]
    assert compacted, "compaction never ran"
    for call in provider.calls:
        assert pairs_intact(call.messages)
        assert call.messages[0].text.startswith("the original task")
        roles = [m.role for m in call.messages]
        assert all(a != b for a, b in itertools.pairwise(roles))


async def test_context_exhausted_when_nothing_can_be_dropped() -> None:
    limits = LoopLimits(context_window=100)
    result = await make_loop(["never"], limits=limits).run("y" * 2000)
    assert result.termination == TerminationReason.CONTEXT_EXHAUSTED


async def test_context_overflow_from_the_provider_compacts_then_gives_up() -> None:
    overflow = ModelError("prompt is too long", kind="context_overflow", status_code=400)
    result = await make_loop([overflow]).run("hi")
    assert result.termination == TerminationReason.CONTEXT_EXHAUSTED


async def test_cancel_stops_a_running_turn() -> None:
    block = asyncio.Event()
    runner = Runner(block=block)
    loop = make_loop([ToolCall("echo", {"text": "a"}), "never"], runner)
    task = asyncio.create_task(loop.run("work"))
    while not runner.batches:
        await asyncio.sleep(0.01)
    assert loop.running_turn is not None
    assert loop.cancel()
    result = await task
    assert result.termination == TerminationReason.CANCELLED
    assert loop.running_turn is None


class Verifier:
    def __init__(self, verdicts: list[bool]) -> None:
        self.verdicts = verdicts
        self.calls = 0

    async def verify(
        self, *, text: str, messages: Sequence[Message], turn: TurnInfo
    ) -> VerifyOutcome:
        self.calls += 1
        ok = self.verdicts.pop(0)
        return VerifyOutcome(ok, "" if ok else "the answer lacks a test run")


async def test_repair_budget_two_rounds_then_verification_failed() -> None:
    verifier = Verifier([False, False, False])
    provider = ScriptedProvider(["a1", "a2", "a3"])
    loop = make_loop([], provider=provider, verifier=verifier)
    result = await loop.run("do it")
    assert result.termination == TerminationReason.VERIFICATION_FAILED
    assert verifier.calls == 3  # the answer and exactly two repairs
    assert len(provider.calls) == 3
    assert "[verification]" in provider.calls[1].messages[-1].text
    provider.assert_complete()


async def test_repair_round_that_passes_is_natural() -> None:
    verifier = Verifier([False, True])
    result = await make_loop(["a1", "a2"], verifier=verifier).run("do it")
    assert result.termination == TerminationReason.NATURAL
    assert result.text == "a2"


async def test_input_blocked_by_prompt_gate() -> None:
    async def gate(prompt: str, turn: TurnInfo) -> PromptDecision:
        return PromptDecision(blocked="secret" in prompt, reason="no secrets")

    provider = ScriptedProvider(["never"])
    result = await make_loop([], provider=provider, prompt_gate=gate).run("print the secret")
    assert result.termination == TerminationReason.INPUT_BLOCKED
    assert provider.calls == []


async def test_failed_batch_save_runs_nothing() -> None:
    runner = Runner()
    cps = Checkpoints(fail_batch=True)
    loop = make_loop([ToolCall("echo", {"text": "x"})], runner, checkpointer=cps)
    result = await loop.run("go")
    assert result.termination == TerminationReason.CHECKPOINT_FAILED
    assert runner.batches == []


async def test_batch_saved_before_tools_run_and_again_after() -> None:
    cps = Checkpoints()
    order: list[str] = []

    class OrderedRunner(Runner):
        async def run_batch(
            self, calls: Sequence[ToolUseBlock], *, turn: TurnInfo, plan: BoundToolPlan
        ) -> list[ToolResultBlock]:
            order.append(f"run after {cps.saves[-1][0]}")
            return await super().run_batch(calls, turn=turn, plan=plan)

    loop = make_loop([ToolCall("echo", {"text": "x"}), "ok"], OrderedRunner(), checkpointer=cps)
    await loop.run("go")
    assert order == ["run after batch"]
    kinds = [k for k, _ in cps.saves]
    assert kinds[:3] == ["save", "batch", "save"]


async def test_plan_refresh_affects_only_the_next_step() -> None:
    plans = [PLAN, PLAN.refreshed([echo, *[]])]

    @tool
    async def other(ctx: ToolContext) -> str:
        """Other."""
        return "o"

    newer = PLAN.refreshed([echo, other])
    seq = iter([PLAN, newer, newer])
    runner = Runner()
    provider = ScriptedProvider([ToolCall("echo", {"text": "1"}), "done"])
    deps_loop = make_loop([], runner, provider=provider)
    object.__setattr__(deps_loop.deps, "plan_source", lambda: next(seq))
    await deps_loop.run("go")
    assert plans[0] is plans[1]  # unchanged content keeps its generation
    assert runner.plans == [PLAN]  # dispatched against the plan bound to that step
    assert [t.name for t in provider.calls[1].tools] == ["echo", "other"]
    assert newer.generation == PLAN.generation + 1


async def test_large_prompt_is_passed_whole() -> None:
    provider = ScriptedProvider(["ok"])
    big = "z" * 300_000
    result = await make_loop([], provider=provider).run(big)
    assert result.ok
    assert provider.calls[0].messages[0].text == big


class Crash(BaseException):
    """Stands for the process dying (nothing in the loop may catch it)."""


class Chain:
    """A checkpointer keeping the last saved (messages, state), like the chain after a
    crash; ``crash_on_save``: die right after the N-th save of a finished tool batch."""

    def __init__(self, *, crash_on_batch_done: int | None = None) -> None:
        self.messages: list[Message] = []
        self.state: dict[str, Any] = {}
        self.batches_done = 0
        self.crash_on_batch_done = crash_on_batch_done

    async def save(
        self, *, messages: Sequence[Message], state: dict[str, Any], status: str
    ) -> None:
        self.messages, self.state = list(messages), dict(state)
        if messages and messages[-1].tool_results:
            self.batches_done += 1
            if self.batches_done == self.crash_on_batch_done:
                raise Crash

    async def save_batch_proposed(
        self, *, messages: Sequence[Message], state: dict[str, Any], turn: TurnInfo
    ) -> None:
        self.messages, self.state = list(messages), dict(state)


def _resumed_loop(chain: Chain, provider: ScriptedProvider, **kw: Any) -> AgenticLoop:
    loop = make_loop([], provider=provider, checkpointer=chain, **kw)
    loop.messages = list(chain.messages)
    return loop


async def test_a_resumed_turn_continues_its_rounds_and_stops_at_max_rounds_in_total() -> None:
    chain = Chain(crash_on_batch_done=3)  # dies in round 3 of the turn
    calls = [ToolCall("echo", {"text": f"r{i}"}) for i in range(10)]
    first = ScriptedProvider(calls)
    with pytest.raises(Crash):
        await make_loop([], provider=first, checkpointer=chain,
                        limits=LoopLimits(max_rounds=5)).run("work", turn_id="t-1")
    assert len(first.calls) == 3 and chain.state["round"] == 2
    again = ScriptedProvider(calls[3:])
    result = await _resumed_loop(chain, again, limits=LoopLimits(max_rounds=5)).resume(
        turn_id="t-1", saved=chain.state)
    assert result.termination == TerminationReason.MAX_ROUNDS
    assert result.rounds == 5 and result.turn_id == "t-1"
    assert len(again.calls) == 2  # 5 in total, not 3 + 5
    seen = again.calls[0].messages  # the model sees the turn's earlier rounds
    assert [m.tool_results[0].text_content for m in seen if m.tool_results] == ["r0", "r1", "r2"]
    assert result.usage.input_tokens == 50  # spend kept counting across the crash
    assert chain.state["recoveries"] == 1


async def test_a_resumed_turn_counts_the_time_it_used_before() -> None:
    chain = Chain()
    chain.messages = [Message.user("work")]
    chain.state = {"turn_id": "t-1", "round": 0, "elapsed_s": 100.0}
    provider = ScriptedProvider(["never asked"])
    result = await _resumed_loop(chain, provider, limits=LoopLimits(time_budget_s=60)).resume(
        turn_id="t-1", saved=chain.state)
    assert result.termination == TerminationReason.TIME_BUDGET
    assert provider.calls == []
    assert chain.state["elapsed_s"] >= 100.0


async def test_a_resumed_turn_keeps_its_repeated_error_count() -> None:
    chain = Chain()
    chain.messages = [Message.user("try")]
    from geode.loop.phase_observe import call_key

    streak = {call_key("echo", {"text": "x"}, "boom"): 2}
    chain.state = {"turn_id": "t-1", "round": 2, "error_streak": streak}
    runner = Runner(error="boom")
    loop = _resumed_loop(chain, ScriptedProvider([ToolCall("echo", {"text": "x"})] * 5),
                         runner=runner, limits=LoopLimits(repeated_error_limit=3))
    result = await loop.resume(turn_id="t-1", saved=chain.state)
    assert result.termination == TerminationReason.REPEATED_ERRORS
    assert len(runner.batches) == 1


async def test_recovery_limit_ends_a_turn_that_keeps_dying_without_calling_the_model() -> None:
    chain = Chain()
    chain.messages = [Message.user("poison")]
    chain.state = {"turn_id": "t-1", "recoveries": 1}
    provider = ScriptedProvider([])
    with pytest.raises(Crash):  # the resume is counted durably before anything runs
        loop = _resumed_loop(chain, ScriptedProvider([Crash()]),
                             limits=LoopLimits(recovery_limit=2))
        await loop.resume(turn_id="t-1", saved=chain.state)
    assert chain.state["recoveries"] == 2
    result = await _resumed_loop(chain, provider, limits=LoopLimits(recovery_limit=2)).resume(
        turn_id="t-1", saved=chain.state)
    assert result.termination == TerminationReason.RECOVERY_LIMIT
    assert "interrupted 3 times" in result.detail
    assert provider.calls == []
    assert chain.state["last_termination"] == "recovery_limit"


class Spend:
    """A SpendGate refusing once ``cap`` tokens were recorded."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.records: list[tuple[str, int, float | None]] = []
        self.checks = 0

    async def check(self, *, turn: TurnInfo, turn_cost_usd: float, request: Any = None,
                    price_per_mtok: Any = None) -> SpendRefusal | None:
        self.checks += 1
        used = sum(r[1] for r in self.records)
        if used < self.cap:
            return None
        return SpendRefusal(cap="max_tokens_per_day", scope="daemon", used=used,
                            limit=self.cap, resets_at="tomorrow", message=f"cap: {used} used")

    async def record(
        self, *, turn: TurnInfo, model: str, usage: Usage, cost_usd: float | None
    ) -> None:
        self.records.append((turn.turn_id, usage.input_tokens + usage.output_tokens, cost_usd))

    async def release(self, *, turn: TurnInfo, spent: bool) -> None:
        self.records.append((turn.turn_id, -1 if spent else 0, None))


async def test_a_reached_spend_cap_ends_the_turn_before_the_model_call() -> None:
    spend = Spend(cap=20)
    provider = ScriptedProvider([ToolCall("echo", {"text": "a"}), ToolCall("echo", {"text": "b"}),
                                 "never asked"])
    result = await make_loop([], provider=provider, spend=spend).run("spend", turn_id="t-9")
    assert result.termination == TerminationReason.SPEND_CAP
    assert result.detail == "cap: 30 used"
    assert len(provider.calls) == 2  # the third call was never made
    assert spend.records == [("t-9", 15, None), ("t-9", 15, None)]  # no price: no cost
    assert spend.checks == 3


@pytest.mark.parametrize("reason", list(TerminationReason))
def test_every_reason_has_a_test(reason: TerminationReason) -> None:
    import inspect
    import sys

    source = inspect.getsource(sys.modules[__name__])
    assert f"TerminationReason.{reason.name}" in source


# -- never silent for long (issue #23 item 3) ------------------------------------------------


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.waiting = asyncio.Event()

    async def __call__(self, ev: Any) -> None:
        self.seen.append((ev.kind, dict(ev.data)))
        if ev.kind == "model_waiting":
            self.waiting.set()

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [d for k, d in self.seen if k == kind]


async def test_a_stalled_model_call_says_it_is_waiting_and_ends_at_its_deadline() -> None:
    events = Events()
    provider = ScriptedProvider(["never arrives"], latency=3600)
    loop = make_loop(
        [], provider=provider, on_event=events,
        limits=LoopLimits(model_call_deadline_s=0.5, waiting_notice_s=0.1),
        retry=RetryPolicy(max_attempts=4),
    )
    result = await loop.run("hello?")
    waiting = events.kinds("model_waiting")
    assert waiting, "no waiting notice while the model stalled"
    assert waiting[0]["attempt"] == 1 and waiting[0]["max_attempts"] == 4
    assert result.termination == TerminationReason.MODEL_ERROR
    assert "no answer from the model within 0.5 s" in result.detail
    assert "call_deadline_s" in result.detail


async def test_the_time_budget_still_wins_when_it_is_shorter_than_the_call_deadline() -> None:
    provider = ScriptedProvider(["late"], latency=3600)
    loop = make_loop([], provider=provider,
                     limits=LoopLimits(time_budget_s=0.2, model_call_deadline_s=30))
    result = await loop.run("hurry")
    assert result.termination == TerminationReason.TIME_BUDGET


async def test_each_retry_is_one_event_and_one_log_line() -> None:
    from structlog.testing import capture_logs

    events = Events()
    provider = ScriptedProvider(
        [ModelError("busy", kind="overloaded"), ModelError("busy", kind="overloaded"), "ok"]
    )
    loop = make_loop([], provider=provider, on_event=events,
                     retry=RetryPolicy(max_attempts=4, base_delay=0.0, max_delay=0.0))
    with capture_logs() as logs:
        result = await loop.run("hi")
    assert result.ok
    retries = events.kinds("model_retry")
    assert [(r["attempt"], r["error"]) for r in retries] == [(2, "overloaded"), (3, "overloaded")]
    retry_lines = [e for e in logs if "retry" in str(e.get("event", ""))]
    assert len(retry_lines) == 2, retry_lines


def test_the_waiting_notice_comes_within_five_seconds_by_default() -> None:
    from geode.settings import ModelSettings

    assert LoopLimits().waiting_notice_s is not None and LoopLimits().waiting_notice_s <= 5
    assert ModelSettings().waiting_notice_s <= 5
    assert ModelSettings().call_deadline_s > 0


def test_the_waiting_text_is_the_same_everywhere() -> None:
    from geode.loop import model_wait_text

    assert model_wait_text(
        "model_waiting", {"elapsed_s": 42, "attempt": 2, "max_attempts": 4}
    ) == "waiting for the model (42 s, attempt 2/4)"
    assert model_wait_text("tool_call", {}) is None


class PathRunner:
    """Fails every call with one message until ``ok_after`` batches have run."""

    def __init__(self, *, error: str, ok_after: int) -> None:
        self.error, self.ok_after, self.batches = error, ok_after, 0

    async def run_batch(
        self, calls: Sequence[ToolUseBlock], *, turn: TurnInfo, plan: BoundToolPlan
    ) -> list[ToolResultBlock]:
        self.batches += 1
        if self.batches > self.ok_after:
            return [ToolResultBlock.text(c.id, "created") for c in calls]
        return [ToolResultBlock.text(c.id, self.error, is_error=True) for c in calls]


async def test_different_calls_failing_with_the_same_message_are_progress() -> None:
    # ten rounds of "Parent directory does not exist" for different paths, then success
    runner = PathRunner(error="Parent directory does not exist", ok_after=10)
    script: list[Any] = [ToolCall("echo", {"text": f"dir/{i}/file"}) for i in range(11)]
    provider = ScriptedProvider([*script, "built the tree"])
    result = await make_loop([], runner, provider=provider).run("build a tree")
    assert result.termination == TerminationReason.NATURAL
    assert result.text == "built the tree"
    assert runner.batches == 11
    provider.assert_complete()


async def test_the_identical_failing_call_is_told_once_then_stopped() -> None:
    runner = Runner(error="Cannot specify both head and tail")
    events: list[Any] = []

    async def sink(e: Any) -> None:
        events.append(e)

    provider = ScriptedProvider([ToolCall("echo", {"text": "x"})] * 10)
    loop = make_loop([], runner, provider=provider, on_event=sink,
                     limits=LoopLimits(repeated_error_limit=5))
    result = await loop.run("read it")
    assert result.termination == TerminationReason.REPEATED_ERRORS
    assert len(runner.batches) == 5
    assert "5 times" in result.detail
    # the model saw the note exactly once, in the 4th failure's result, before the stop
    notes = [
        r.text_content for call in provider.calls for m in call.messages[-1:]
        for r in m.tool_results if "[loop guard]" in r.text_content
    ]
    assert len(notes) == 1 and "4 times" in notes[0]
    guards = [(e.guard, e.action, e.count, e.limit) for e in events if e.kind == "loop_guard"]
    assert guards == [("repeated_call", "noted", 4, 5), ("repeated_call", "stopped", 5, 5)]


async def test_no_progress_bound_stops_all_error_rounds_whatever_the_calls() -> None:
    runner = PathRunner(error="nope", ok_after=100)
    provider = ScriptedProvider([ToolCall("echo", {"text": str(i)}) for i in range(20)])
    loop = make_loop([], runner, provider=provider,
                     limits=LoopLimits(max_error_rounds=6, max_rounds=30))
    result = await loop.run("flail")
    assert result.termination == TerminationReason.REPEATED_ERRORS
    assert runner.batches == 6
    assert "6 rounds in a row" in result.detail
    told = provider.calls[-1].messages[-1].tool_results[0].text_content
    assert "Every tool call has failed for 5 rounds" in told
