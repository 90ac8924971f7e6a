"""LaneQueue: serialisation per session, a global cap shared by kinds, bounded waits,
and no lane ever leaked by an exception or a cancellation."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from geode.daemon.lanes import LaneBusy, LaneQueue
from geode.errors import ConfigError


class Probe:
    """Records overlap: how many bodies ran at once, and in which order they ran."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.order: list[str] = []

    async def body(self, name: str, gate: asyncio.Event | None = None) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)
        self.order.append(f"+{name}")
        try:
            if gate is not None:
                await gate.wait()
            else:
                for _ in range(3):
                    await asyncio.sleep(0)
        finally:
            self.order.append(f"-{name}")
            self.now -= 1


async def _run(lanes: LaneQueue, probe: Probe, sid: str, name: str, kind: str = "cli",
               gate: asyncio.Event | None = None) -> None:
    async with lanes.acquire(sid, kind=kind):  # type: ignore[arg-type]
        await probe.body(name, gate)


def _assert_clean(lanes: LaneQueue) -> None:
    stats = lanes.stats
    assert (stats.running, stats.waiting, stats.sessions) == (0, 0, 0)
    assert lanes._global._value == lanes.global_cap  # every global slot is back
    for kind, sem in lanes._kinds.items():
        assert sem._free == lanes.caps[kind], kind


async def test_same_session_serialises_and_different_sessions_overlap() -> None:
    lanes = LaneQueue(global_cap=4, wait_timeout_s=5)
    probe = Probe()
    await asyncio.gather(_run(lanes, probe, "s1", "a"), _run(lanes, probe, "s1", "b"))
    assert probe.order == ["+a", "-a", "+b", "-b"]  # never interleaved
    assert probe.peak == 1

    probe2 = Probe()
    await asyncio.gather(_run(lanes, probe2, "s1", "a"), _run(lanes, probe2, "s2", "b"))
    assert probe2.peak == 2
    _assert_clean(lanes)


async def test_more_requests_than_global_cap_queue_and_all_run() -> None:
    lanes = LaneQueue(global_cap=2, wait_timeout_s=5)
    probe = Probe()
    await asyncio.gather(*(_run(lanes, probe, f"s{i}", str(i)) for i in range(7)))
    assert probe.peak == 2  # the cap held
    assert sorted(x for x in probe.order if x.startswith("+")) == sorted(
        f"+{i}" for i in range(7)
    )
    _assert_clean(lanes)


async def test_sub_limits_share_the_global_cap() -> None:
    lanes = LaneQueue(global_cap=3, caps={"cli": 1, "channel": 2}, wait_timeout_s=5)
    gate = asyncio.Event()
    probe = Probe()
    tasks = [asyncio.create_task(_run(lanes, probe, f"c{i}", f"cli{i}", "cli", gate))
             for i in range(2)]
    tasks += [asyncio.create_task(_run(lanes, probe, f"h{i}", f"ch{i}", "channel", gate))
              for i in range(3)]
    tasks.append(asyncio.create_task(_run(lanes, probe, "j", "job", "scheduler", gate)))
    for _ in range(20):
        await asyncio.sleep(0)
    running = {x[1:] for x in probe.order if x.startswith("+")}
    # cli capped at 1, channel at 2 and all kinds together at 3: the scheduler job waits
    assert len(running) == 3
    assert sum(n.startswith("cli") for n in running) == 1
    assert sum(n.startswith("ch") for n in running) == 2
    assert lanes.stats.waiting == 3
    gate.set()
    await asyncio.gather(*tasks)
    assert probe.peak == 3
    _assert_clean(lanes)


def test_a_sub_limit_above_the_global_cap_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="channel_cap"):
        LaneQueue(global_cap=2, caps={"channel": 3})


async def test_busy_after_the_wait_bound_names_the_full_lane() -> None:
    waits: list[tuple[str, str]] = []
    lanes = LaneQueue(global_cap=1, wait_timeout_s=0.05,
                      on_wait=lambda kind, _w, outcome: waits.append((kind, outcome)))
    gate = asyncio.Event()
    holder = asyncio.create_task(_run(lanes, Probe(), "s1", "held", gate=gate))
    await asyncio.sleep(0)
    with pytest.raises(LaneBusy) as same_session:
        async with lanes.acquire("s1"):
            pytest.fail("must not run")
    assert same_session.value.lane == "session"
    assert same_session.value.waited_s >= 0.05
    with pytest.raises(LaneBusy) as other_session:
        async with lanes.acquire("s2", kind="channel"):
            pytest.fail("must not run")
    assert other_session.value.lane == "global"
    assert "busy" in str(other_session.value)
    assert waits == [("cli", "ok"), ("cli", "busy"), ("channel", "busy")]
    gate.set()
    await holder
    _assert_clean(lanes)


async def test_an_exception_in_the_body_releases_every_lane() -> None:
    lanes = LaneQueue(global_cap=1, caps={"cli": 1}, wait_timeout_s=0.2)
    for _ in range(3):
        with pytest.raises(RuntimeError):
            async with lanes.acquire("s1", kind="cli"):
                raise RuntimeError("boom")
    _assert_clean(lanes)
    async with lanes.acquire("s1", kind="cli"):  # would be LaneBusy if anything leaked
        assert lanes.stats.running == 1


async def test_cancelling_holders_and_waiters_leaks_nothing() -> None:
    lanes = LaneQueue(global_cap=2, caps={"cli": 1}, wait_timeout_s=5)
    gate = asyncio.Event()
    probe = Probe()
    tasks = [
        asyncio.create_task(_run(lanes, probe, "s1", "hold", "cli", gate)),   # holds all
        asyncio.create_task(_run(lanes, probe, "s1", "same", "cli", gate)),   # session wait
        asyncio.create_task(_run(lanes, probe, "s2", "kind", "cli", gate)),   # cli wait
        asyncio.create_task(_run(lanes, probe, "s3", "ch", "channel", gate)),  # runs
        asyncio.create_task(_run(lanes, probe, "s4", "glob", "channel", gate)),  # global wait
    ]
    for _ in range(10):
        await asyncio.sleep(0)
    assert lanes.stats.running == 2 and lanes.stats.waiting == 3
    for t in tasks:
        t.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    _assert_clean(lanes)
    assert probe.now == 0


async def test_a_waiter_cancelled_as_the_slot_frees_does_not_swallow_it() -> None:
    lanes = LaneQueue(global_cap=1, wait_timeout_s=5)
    gate = asyncio.Event()
    probe = Probe()
    holder = asyncio.create_task(_run(lanes, probe, "a", "a", gate=gate))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(_run(lanes, probe, "b", "b"))
    third = asyncio.create_task(_run(lanes, probe, "c", "c"))
    await asyncio.sleep(0)
    gate.set()  # the slot goes to `waiter` ...
    waiter.cancel()  # ... which is cancelled before it runs: `third` must still get it
    await holder
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.wait_for(third, 2)
    assert "+c" in probe.order and "+b" not in probe.order
    _assert_clean(lanes)


async def test_a_request_waiting_for_a_person_lends_its_global_slot() -> None:
    from geode.daemon.lanes import slots_released

    q = LaneQueue(global_cap=1, caps={"channel": 1}, wait_timeout_s=30)
    lent, back, order = asyncio.Event(), asyncio.Event(), []

    async def waiting_turn() -> None:
        async with q.acquire("s1", kind="channel"):
            async with slots_released():
                lent.set()
                await back.wait()  # the approval wait
            order.append("s1 resumed")
            assert q.stats.running == 1

    async def other_thread() -> None:
        await lent.wait()
        async with q.acquire("s2", kind="channel"):
            order.append("s2 ran")
            assert q.stats.running == 1
        back.set()

    await asyncio.gather(waiting_turn(), other_thread())
    assert order == ["s2 ran", "s1 resumed"]
    assert q.stats.running == 0 and q._global._value == 1 and q._kinds["channel"]._free == 1
    async with slots_released():  # outside a lane: nothing to lend
        pass


async def test_cancelled_while_taking_its_slot_back_releases_only_what_it_holds() -> None:
    from geode.daemon.lanes import slots_released

    q = LaneQueue(global_cap=1, wait_timeout_s=30)
    lent, holding, done = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def waiting_turn() -> None:
        async with q.acquire("s1"), slots_released():
            lent.set()
            await holding.wait()  # returns while s2 holds the only slot

    async def other() -> None:
        await lent.wait()
        async with q.acquire("s2"):
            holding.set()
            await done.wait()

    a, b = asyncio.create_task(waiting_turn()), asyncio.create_task(other())
    await holding.wait()
    for _ in range(5):
        await asyncio.sleep(0)  # s1 now waits to take its slot back
    a.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await a
    done.set()
    await b
    assert q.stats.running == 0 and q._global._value == 1
    async with q.acquire("s3"):  # the slot is usable again, exactly once
        assert q._global._value == 0


async def test_unbounded_waiters_are_told_their_place_and_served_in_arrival_order() -> None:
    lanes = LaneQueue(global_cap=4, caps={"channel": 1}, wait_timeout_s=0.01)
    gate = asyncio.Event()
    probe = Probe()
    seen: dict[str, list[int]] = {}

    async def queued(name: str) -> None:
        def tell(ahead: int) -> None:
            seen.setdefault(name, []).append(ahead)

        async with lanes.acquire(name, kind="channel", wait=False, on_queued=tell):
            await probe.body(name)

    holder = asyncio.create_task(_run(lanes, probe, "h", "h", "channel", gate))
    await asyncio.sleep(0)
    waiters = [asyncio.create_task(queued(n)) for n in ("w1", "w2", "w3")]
    for _ in range(5):
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)  # past wait_timeout_s: wait=False means no bound
    assert lanes.stats.waiting == 3
    assert seen == {"w1": [0], "w2": [1], "w3": [2]}
    gate.set()
    await asyncio.wait_for(asyncio.gather(holder, *waiters), 5)
    assert [o for o in probe.order if o.startswith("+")] == ["+h", "+w1", "+w2", "+w3"]
    assert seen == {"w1": [0], "w2": [1, 0], "w3": [2, 1, 0]}
    _assert_clean(lanes)


async def test_a_long_turn_moves_to_the_long_lane_and_frees_its_channel_slot() -> None:
    lanes = LaneQueue(global_cap=1, caps={"channel": 1}, wait_timeout_s=5,
                      long_after_s=0.01, long_cap=1)
    long_gate, long2_gate = asyncio.Event(), asyncio.Event()
    probe = Probe()
    long_turn = asyncio.create_task(_run(lanes, probe, "long", "long", "channel", long_gate))
    while lanes.stats.long_running == 0:  # moved after long_after_s
        await asyncio.sleep(0.01)
    assert lanes.stats.running == 0
    # a quick turn runs while the long one still runs
    await asyncio.wait_for(_run(lanes, probe, "quick", "quick", "channel"), 5)
    assert probe.order[:3] == ["+long", "+quick", "-quick"]
    # a second long turn finds the long lane full: it keeps its channel slot meanwhile
    long2 = asyncio.create_task(_run(lanes, probe, "long2", "long2", "channel", long2_gate))
    await asyncio.sleep(0.05)
    assert lanes.stats.running == 1 and lanes.stats.long_running == 1
    long_gate.set()
    await long_turn
    while lanes.stats.long_running == 0:
        await asyncio.sleep(0.01)
    assert lanes.stats.running == 0
    long2_gate.set()
    await long2
    _assert_clean(lanes)
    assert lanes._long._value == 1


async def test_waiters_of_a_kind_are_served_by_their_order_key() -> None:
    lanes = LaneQueue(global_cap=4, caps={"channel": 1}, wait_timeout_s=5)
    gate = asyncio.Event()
    probe = Probe()
    seen: dict[str, list[int]] = {}
    holder = asyncio.create_task(_run(lanes, probe, "h", "h", "channel", gate))
    await asyncio.sleep(0)

    async def queued(name: str, order: int) -> None:
        async with lanes.acquire(name, kind="channel", wait=False, order=order,
                                 on_queued=lambda n: seen.setdefault(name, []).append(n)):
            await probe.body(name)

    # they reach the lane out of order (a restart recovers them, the network reorders them)
    waiters = [asyncio.create_task(queued(n, o)) for n, o in (("c", 30), ("a", 10), ("b", 20))]
    for _ in range(5):
        await asyncio.sleep(0)
    assert seen["a"][-1] == 0 and seen["b"][-1] == 1 and seen["c"][-1] == 2
    gate.set()
    await asyncio.wait_for(asyncio.gather(holder, *waiters), 5)
    assert [o for o in probe.order if o.startswith("+")] == ["+h", "+a", "+b", "+c"]
    _assert_clean(lanes)


async def test_a_turn_lending_its_slots_that_moves_to_the_long_lane_takes_none_back() -> None:
    from geode.daemon.lanes import slots_released

    lanes = LaneQueue(global_cap=1, caps={"channel": 1}, wait_timeout_s=5,
                      long_after_s=0.01, long_cap=1)
    back = asyncio.Event()

    async def turn() -> None:
        async with lanes.acquire("s1", kind="channel"):
            async with slots_released():  # waits for a person past long_after_s
                await back.wait()
            assert lanes.stats.running == 0 and lanes.stats.long_running == 1

    task = asyncio.create_task(turn())
    while lanes.stats.long_running == 0:
        await asyncio.sleep(0.01)
    back.set()
    await task
    _assert_clean(lanes)
    assert lanes._long._value == 1
