"""The asyncio tasks a quick turn costs: the lanes' long-lane mover, the model call's
waiting notices and an observer's executor future start none until they have work (timers
instead of sleeping tasks); the work still happens when it is due (tests/daemon/test_lanes.py,
tests/loop/test_loop.py keep that)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from geode.daemon.lanes import LaneQueue
from geode.hooks.system import HookSystem
from geode.loop import LoopLimits
from geode.loop.events import TurnFinished
from tests.loop.test_loop import Events, make_loop


@contextmanager
def tasks_made() -> Iterator[list[str]]:
    """The names of the coroutines run as tasks on the running loop inside."""
    loop = asyncio.get_running_loop()
    made: list[str] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any],
                **kw: Any) -> asyncio.Task[Any]:
        made.append(coro.__qualname__)
        return asyncio.Task(coro, loop=loop, **kw)

    loop.set_task_factory(factory)  # type: ignore[arg-type]
    try:
        yield made
    finally:
        loop.set_task_factory(None)


async def test_a_quick_turn_holds_its_lanes_without_a_task() -> None:
    lanes = LaneQueue(global_cap=2, caps={"channel": 2}, wait_timeout_s=5,
                      long_after_s=60, long_cap=1)
    with tasks_made() as made:
        async with lanes.acquire("s1", kind="channel"):
            assert lanes.stats.running == 1
    assert made == []  # the long-lane move is a timer until it is due
    assert lanes.stats.running == 0 and lanes.stats.long_running == 0


async def test_a_quick_model_call_starts_no_waiting_notice_task() -> None:
    events = Events()
    loop = make_loop(["hi"], on_event=events, limits=LoopLimits(waiting_notice_s=5))
    with tasks_made() as made:
        result = await loop.run("hello")
    assert result.text == "hi"
    assert [m for m in made if "notify" in m] == []
    assert not events.kinds("model_waiting")


async def test_an_observers_future_is_waited_for_and_its_failure_logged_without_a_task(
) -> None:
    observers = HookSystem()
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[Any]] = []

    def observer(session_id: str, event: Any) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = loop.create_future()
        futures.append(fut)
        return fut

    observers.subscribe_loop(observer)
    event = TurnFinished(turn_id="t", termination="natural", rounds=1)
    with tasks_made() as made:
        observers.loop_event("s", event)
        observers.loop_event("s", event)
    assert made == []
    drained = asyncio.ensure_future(observers.drain())
    await asyncio.sleep(0)
    assert not drained.done()  # drain waits for them
    futures[0].set_result(None)
    with structlog.testing.capture_logs() as logs:
        futures[1].set_exception(OSError("disk full"))
        await asyncio.wait_for(drained, 5)
    assert [(e["event"], str(e["exc_info"])) for e in logs] == [
        ("observer failed", "disk full")]


async def test_an_observer_gets_only_the_event_types_it_takes() -> None:
    from geode.loop.events import TurnStarted

    observers = HookSystem()
    calls: list[tuple[str, Any]] = []
    observers.subscribe_loop(lambda sid, ev: calls.append(("finished", ev)),
                             only=(TurnFinished,))
    observers.subscribe_loop(lambda sid, ev: calls.append(("all", ev)))
    started, finished = TurnStarted(turn_id="t"), TurnFinished(turn_id="t",
                                                               termination="natural", rounds=1)
    observers.loop_event("s", started)
    observers.loop_event("s", finished)
    assert calls == [("all", started), ("finished", finished), ("all", finished)]
