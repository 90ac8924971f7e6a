"""Loop events are typed values; a tool result's status is data, never parsed from its text."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from geode.executor import ToolExecutor
from geode.hooks import HookSystem
from geode.loop import (
    LoopEvent,
    ModelResponded,
    ToolProposed,
    ToolResulted,
    TurnFinished,
    TurnInfo,
    TurnStarted,
)
from geode.loop.events import ModelCallFinished, ModelCallStarted, ObservedLoopEvent
from geode.messages import ToolResultBlock, ToolUseBlock
from geode.policy import session_scope
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.tools.plan import BoundToolPlan
from tests.loop.test_loop import make_loop


class _Said:
    """A tool runner whose error text happens to start like a denial."""

    async def run_batch(
        self, calls: Sequence[ToolUseBlock], *, turn: TurnInfo, plan: BoundToolPlan
    ) -> list[ToolResultBlock]:
        return [ToolResultBlock.text(c.id, "denied by the remote server: 403", is_error=True)
                for c in calls]


async def test_events_are_typed_and_keep_their_wire_shape() -> None:
    seen: list[LoopEvent] = []

    async def sink(ev: LoopEvent) -> None:
        seen.append(ev)

    provider = ScriptedProvider([ToolCall("echo", {"text": "hi"}), "done"])
    loop = make_loop([], provider=provider, on_event=sink)
    await loop.run("go")
    started = [e for e in seen if isinstance(e, TurnStarted)]
    assert len(started) == 1 and started[0].kind == "turn_started"
    calls = [e for e in seen if isinstance(e, ToolProposed)]
    assert [(c.name, c.input) for c in calls] == [("echo", {"text": "hi"})]
    assert calls[0].data == {"id": calls[0].id, "name": "echo", "input": {"text": "hi"}}
    models = [e for e in seen if isinstance(e, ModelResponded)]
    assert len(models) == 2 and all(m.model == "scripted" and m.latency_s >= 0 for m in models)
    finished = seen[-1]
    assert isinstance(finished, TurnFinished)
    assert (finished.termination, finished.rounds) == ("natural", 2)


async def test_an_error_text_starting_like_a_denial_is_an_error() -> None:
    seen: list[LoopEvent] = []

    async def sink(ev: LoopEvent) -> None:
        seen.append(ev)

    provider = ScriptedProvider([ToolCall("echo", {"text": "x"}), "ok"])
    loop = make_loop([], _Said(), provider=provider, on_event=sink)  # type: ignore[arg-type]
    result = await loop.run("go")
    assert result.tool_calls == [{"name": "echo", "status": "error"}]
    [res] = [e for e in seen if isinstance(e, ToolResulted)]
    assert res.status == "error" and res.check is None


async def test_a_denial_carries_its_check_as_data(tmp_path: Path) -> None:
    observers = HookSystem()
    typed: list[tuple[str, LoopEvent]] = []
    named: list[tuple[str, str]] = []
    observers.subscribe_loop(lambda sid, ev: typed.append((sid, ev)))
    observers.subscribe(lambda name, data: named.append((name, str(data.get("status")))),
                        events="tool_result")
    executor = ToolExecutor(scope=session_scope("DAEMON", channel_tools=["read_file"]),
                            workspace=tmp_path)
    provider = ScriptedProvider([ToolCall("echo", {"text": "x"}), "ok"])
    loop = make_loop([], executor, provider=provider, observer=observers)  # type: ignore[arg-type]
    result = await loop.run("go")
    assert result.tool_calls == [{"name": "echo", "status": "denied"}]
    [res] = [ev for _sid, ev in typed if isinstance(ev, ToolResulted)]
    assert res.status == "denied" and res.check == "scope"
    assert all(sid == "s-test" for sid, _ in typed)
    assert named == [("tool_result", "denied")]  # name-based observers still see it


async def test_model_calls_reach_the_observers_typed_and_never_the_driver() -> None:
    observers = HookSystem()
    typed: list[ObservedLoopEvent] = []
    named: list[tuple[str, list[str]]] = []
    driven: list[LoopEvent] = []

    async def sink(ev: LoopEvent) -> None:
        driven.append(ev)

    observers.subscribe_loop(lambda sid, ev: typed.append(ev))
    observers.subscribe(lambda name, data: named.append((name, list(data))),
                        events="model_call_.*")
    provider = ScriptedProvider([ToolCall("echo", {"text": "hi"}), "done"])
    loop = make_loop([], provider=provider, on_event=sink,
                     observer=observers)  # type: ignore[arg-type]
    await loop.run("go")
    calls = [e for e in typed if isinstance(e, ModelCallStarted | ModelCallFinished)]
    assert [type(e) for e in calls] == [ModelCallStarted, ModelCallFinished] * 2
    assert [e.round for e in calls if isinstance(e, ModelCallStarted)] == [0, 1]
    done = [e for e in calls if isinstance(e, ModelCallFinished)]
    assert all(e.model == "scripted" and e.provider == provider.name and e.outcome == "ok"
               and e.error == "" and e.attempts == 1 for e in done)
    assert done[1].stop_reason == "end_turn" and done[1].input_tokens > 0
    assert not [e for e in driven if isinstance(e, ModelCallStarted | ModelCallFinished)]
    # name-based observers keep the names and payload keys they always had
    assert named[:2] == [
        ("model_call_started", ["session_id", "turn_id", "model", "provider", "round"]),
        ("model_call_finished", ["session_id", "turn_id", "model", "provider", "outcome",
                                 "error", "input_tokens", "output_tokens", "cost_usd",
                                 "stop_reason", "attempts"]),
    ]
