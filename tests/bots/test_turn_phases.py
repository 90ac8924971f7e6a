"""The chat turn as phases (bots.turn): the order the driver walks them in, as data.

With fake phases, the driver's ``match`` alone: which phase takes which step, that the
indicators stop before the answer is recorded, and that they stop when a phase fails. With
the real stack, the steps a turn a killed process left behind walks on the restart, for
each place the kill can leave it: run again, resumed in place, answered from the
checkpoint, or only delivered.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from _harness import answering, crash_at

from bots.turn import (
    Accept,
    Answered,
    DeliverPhase,
    Done,
    Dropped,
    Prepared,
    PreparePhase,
    Ready,
    RunPhase,
    Step,
    TurnRunner,
)
from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import CHAT, finals

_ROW: Any = SimpleNamespace(id=7, session_key="s")
#: what the fake phases neither read nor check (the event, the binding, the fence)
_X: Any = SimpleNamespace()


class _Phases:
    """Fake prepare / run / deliver phases that log each call and answer from a script."""

    def __init__(self, *, run_gives: str = "answered", prepare_raises: bool = False) -> None:
        self.calls: list[str] = []
        self.run_gives = run_gives
        self.prepare_raises = prepare_raises

    # prepare
    async def recover(self, step: Step) -> Step:
        self.calls.append("prepare.recover")
        return Accept(stored=_X, row=_ROW, binding=_X, resume=True)

    def turn(self, step: Accept) -> str:
        self.calls.append("prepare.turn")
        return "turn"

    async def prepare(self, turn: str, prompt: str | None) -> Prepared:
        self.calls.append("prepare.prepare")
        if self.prepare_raises:
            raise RuntimeError("attachments failed")
        return Prepared(turn=turn, prompt="p")  # type: ignore[arg-type]

    # run
    async def show(self, turn: str) -> str:
        self.calls.append("run.show")
        return "shown"

    async def run(self, step: Prepared, shown: str) -> Step:
        self.calls.append("run.run")
        if self.run_gives == "dropped":
            return Dropped(row=_ROW)
        return Answered(row=_ROW, fence=_X, text="hi")

    async def hide(self, shown: str) -> None:
        self.calls.append("run.hide")

    # deliver
    async def record(self, step: Answered) -> Step:
        self.calls.append("deliver.record")
        return Ready(row=step.row, fresh=True)

    async def dropped(self, step: Dropped) -> Step:
        self.calls.append("deliver.dropped")
        return Ready(row=step.row)

    async def deliver(self, step: Ready) -> Step:
        self.calls.append("deliver.deliver")
        return Done()


def _runner(phases: _Phases) -> TurnRunner:
    deps: Any = SimpleNamespace(fault=None, client=None, files=None)
    runner = TurnRunner(deps=deps)
    runner.prepare = runner.running = runner.delivery = phases  # type: ignore[assignment]
    return runner


async def test_a_new_turn_walks_prepare_run_deliver_and_stops_its_indicators_first() -> None:
    phases = _Phases()
    await _runner(phases).run(_X, _ROW, _X)
    assert phases.calls == ["prepare.turn", "run.show", "prepare.prepare", "run.run",
                            "run.hide", "deliver.record", "deliver.deliver"]


async def test_a_recovered_turn_is_decided_first_and_a_dropped_one_delivers_its_notice() -> None:
    phases = _Phases(run_gives="dropped")
    await _runner(phases).recover(_X, _ROW, _X)
    assert phases.calls == ["prepare.recover", "prepare.turn", "run.show", "prepare.prepare",
                            "run.run", "run.hide", "deliver.dropped", "deliver.deliver"]


async def test_the_indicators_stop_when_a_phase_fails_while_the_turn_is_shown() -> None:
    phases = _Phases(prepare_raises=True)
    with pytest.raises(RuntimeError, match="attachments failed"):
        await _runner(phases).run(_X, _ROW, _X)
    assert phases.calls == ["prepare.turn", "run.show", "prepare.prepare", "run.hide"]


async def test_an_answer_given_by_the_layer_is_only_recorded_and_delivered() -> None:
    phases = _Phases()
    runner = _runner(phases)
    runner.prepare = SimpleNamespace(  # type: ignore[assignment]
        answered=lambda row, text: Answered(row=row, fence=_X, text=text))
    await runner.finish(_ROW, "⚠️ Something went wrong")
    assert phases.calls == ["deliver.record", "deliver.deliver"]


# -- the real stack: what a restart walks ---------------------------------------------------------


def _name(step: Step) -> str:
    match step:
        case Accept(resume=True):
            return "Accept(resume)"
        case Accept(recovered=True):
            return "Accept(re-run)"
        case Ready(fresh=True):
            return "Ready(recorded now)"
        case _:
            return type(step).__name__


def _walked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The steps the real phases return from now on, by name (after "Recover" when a
    recovery starts the walk)."""
    walked: list[str] = []

    def spy(cls: type, name: str, before: str | None = None) -> None:
        real = getattr(cls, name)

        async def wrapper(self: Any, *args: Any, **kw: Any) -> Any:
            if before:
                walked.append(before)
            step = await real(self, *args, **kw)
            walked.append(_name(step))
            return step

        monkeypatch.setattr(cls, name, wrapper)

    spy(PreparePhase, "recover", before="Recover")
    spy(PreparePhase, "prepare")
    spy(RunPhase, "run")
    spy(DeliverPhase, "record")
    spy(DeliverPhase, "dropped")
    spy(DeliverPhase, "deliver")
    return walked


@pytest.mark.parametrize(("point", "walk"), [
    # accepted, its progress message up, no checkpoint of the turn: run again, new turn id
    ("progress_started",
     ["Recover", "Accept(re-run)", "Prepared", "Answered", "Ready(recorded now)", "Done"]),
    # started, unfinished (a tool call proposed): resumed in place from its checkpoint
    ("tool_call",
     ["Recover", "Accept(resume)", "Prepared", "Answered", "Ready(recorded now)", "Done"]),
    # finished, not recorded: the answer comes from the checkpoint, no model call
    ("turn_finished", ["Recover", "Answered", "Ready(recorded now)", "Done"]),
    # recorded ready, not delivered: only delivered
    ("final_recorded", ["Recover", "Ready", "Done"]),
])
async def test_the_steps_a_turn_left_by_a_killed_process_walks_on_restart(
        make_stack: Any, fake: Any, monkeypatch: pytest.MonkeyPatch, point: str,
        walk: list[str]) -> None:
    provider = ScriptedProvider([answering], repeat_last=True)
    hit, fault = crash_at(point)
    stack = make_stack(provider=provider, fault=fault)
    await stack.start()
    fake.user_says(CHAT, "@geode_bot crash me", from_user=42)
    await asyncio.wait_for(hit.wait(), 10)
    await stack.crash()
    calls_before = len(provider.calls)

    walked = _walked(monkeypatch)
    stack.fault = None
    await stack.start()
    await fake.wait_until(lambda: finals(fake, "answer to: crash me"), within=15)
    for _ in range(100):  # the walk ends with the delivery's record, just after the edit
        if walked[-1:] == ["Done"]:
            break
        await asyncio.sleep(0.02)
    assert walked == walk
    if "Prepared" not in walk:
        assert len(provider.calls) == calls_before  # answered without asking the model


def test_steps_are_values() -> None:
    done = Done()
    assert done == Done("delivered") and hash(done) == hash(Done("delivered"))
    with pytest.raises(AttributeError):
        done.why = "changed"  # type: ignore[misc]
    assert replace(Ready(row=_ROW), fresh=True).fresh


def test_a_turn_shows_in_a_traceback_by_what_names_it() -> None:
    """A traceback renders each phase frame's locals: the turn's values name the turn, never
    print its records, the running session or the layer's object graph (rendering those
    held the event loop for seconds)."""
    from bots.turn import Turn, TurnDeps

    turn = Turn(stored=SimpleNamespace(id=12), row=_ROW, binding=_X,  # type: ignore[arg-type]
                thread="telegram:1:2:3", fence=_X, workspace=_X, overrides=_X)
    assert repr(turn) == ("Turn(thread='telegram:1:2:3', event=12, row=7, resume=False, "
                          "recovered=False)")
    assert repr(Prepared(turn=turn, prompt="p")).startswith("Prepared(turn=Turn(thread=")
    deps = TurnDeps(**dict.fromkeys(TurnDeps.__dataclass_fields__, _X))
    assert repr(deps).startswith("<bots.turn.steps.TurnDeps object at")
