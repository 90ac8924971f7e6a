"""One supervisor for every long-running task (issue #38, finding 2).

A database error used to end the Telegram poller's task for good (``supervise()`` let the
lease's store error escape): after a 10 s PostgreSQL outage no replica polled again,
nothing was logged and ``/readyz`` said 200. Now every long-running task runs under
:class:`~geode.daemon.supervisor.TaskSupervisor`: a death is logged with its cause and the
task restarts with backoff, and each component's health is what ``/readyz`` reports.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from sqlalchemy.exc import OperationalError

from geode.daemon.supervisor import Backoff, Component, TaskSupervisor
from tests.bots.conftest import CHAT, finals

# -- the supervisor alone -----------------------------------------------------------------


async def test_a_task_that_dies_is_logged_with_its_cause_and_restarted() -> None:
    sup = TaskSupervisor(backoff=Backoff(initial_s=0.01, max_s=0.05, jitter=0.0))
    runs: list[int] = []

    async def body(comp: Component) -> None:
        runs.append(1)
        if len(runs) < 3:
            raise OperationalError("SELECT 1", {}, ConnectionRefusedError("db down"))
        comp.beat("working")
        await asyncio.Event().wait()

    with structlog.testing.capture_logs() as logs:
        comp = sup.spawn("demo.poller", body)
        for _ in range(200):
            if comp.state == "up" and len(runs) == 3:
                break
            await asyncio.sleep(0.01)
    await sup.stop()
    assert len(runs) == 3
    deaths = [e for e in logs if e["event"] == "supervisor.task_died"]
    assert len(deaths) == 2
    assert all(d["component"] == "demo.poller" for d in deaths)
    assert all(d["error_class"] == "OperationalError" for d in deaths)
    assert "db down" in deaths[0]["error"]
    assert comp.restarts == 2


async def test_a_task_that_returns_is_a_death_too_unless_it_runs_once() -> None:
    sup = TaskSupervisor(backoff=Backoff(initial_s=0.01, max_s=0.01, jitter=0.0))
    runs: list[str] = []

    async def returns(comp: Component) -> None:
        runs.append("r")

    async def connects(comp: Component) -> None:
        runs.append("c")

    sup.spawn("loop", returns)
    done = sup.spawn("connect", connects, once=True)
    await asyncio.sleep(0.1)
    await sup.stop()
    assert runs.count("r") >= 3  # restarted
    assert runs.count("c") == 1
    assert done.state == "stopped"


def test_backoff_grows_to_its_cap_with_jitter() -> None:
    b = Backoff(initial_s=1.0, max_s=8.0, jitter=0.5)
    assert [b.delay(n, rand=lambda: 0.5) for n in range(1, 6)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert b.delay(3, rand=lambda: 0.0) == 2.0 and b.delay(3, rand=lambda: 1.0) == 6.0


def test_a_component_that_stops_beating_is_stale() -> None:
    now = [100.0]
    comp = Component(name="x.pump", stale_after_s=5.0, clock=lambda: now[0])
    assert comp.status()[0] is False  # starting: not ready until it works once
    comp.beat("pumping")
    assert comp.status() == (True, "pumping")
    now[0] += 6
    ok, detail = comp.status()
    assert not ok and "stalled" in detail and "6s" in detail
    comp.down("pump pass failed: OperationalError: gone")
    ok, detail = comp.status()
    assert not ok and "OperationalError" in detail
    comp.beat()
    assert comp.status()[0]


# -- the Telegram connector's poller under a store outage ---------------------------------


class _Outage:
    """Makes a store call raise a connection error while ``on`` (a database outage)."""

    def __init__(self) -> None:
        self.on = False
        self.hits = 0

    def wrap(self, fn: Any) -> Any:
        async def call(*a: Any, **kw: Any) -> Any:
            if self.on:
                self.hits += 1
                raise OperationalError("UPDATE geode_leases", {},
                                       ConnectionRefusedError("server closed the connection"))
            return await fn(*a, **kw)

        return call


async def test_a_store_outage_does_not_end_the_poller(make_stack, fake) -> None:
    """The intake lease's renewal fails for a while (the store is down): the poller keeps
    its place, says so on /readyz, and polls (and answers) once the store is back.

    Fails on the code before the supervisor: the store error ended ``supervise()``, which
    reaped the poll loop, and nothing started it again (no getUpdates after the outage).
    """
    stack = make_stack(options={"lease_ttl_s": 0.6})
    conn = await stack.start()
    await fake.wait_until(lambda: conn.polls >= 1, within=10)
    outage = _Outage()
    assert conn.lease is not None
    conn.lease.try_acquire = outage.wrap(conn.lease.try_acquire)  # type: ignore[method-assign]
    with structlog.testing.capture_logs() as logs:
        outage.on = True
        await fake.wait_until(lambda: outage.hits >= 4, within=10)
        daemon = stack.daemon
        assert daemon is not None and daemon.health is not None
        ready, checks = await daemon.health.readiness()
        assert not ready
        assert checks["telegram.intake"]["ok"] is False
        assert "OperationalError" in checks["telegram.intake"]["detail"]
        outage.on = False
        polls = conn.polls
        await fake.wait_until(lambda: conn.polls > polls + 1, within=15)
    assert any(e["event"] in ("connector.lease_failed", "connector.lease_renew_failed")
               and e.get("error_class") == "OperationalError" for e in logs), logs
    fake.user_says(CHAT, "@geode_bot after the outage", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: after the outage"), within=15)
    assert len(finals(fake, "answer to: after the outage")) == 1
    ready, checks = await daemon.health.readiness()
    assert checks["telegram.intake"]["ok"], checks


async def test_a_poller_that_stops_polling_makes_readyz_say_so(
    make_stack, fake, monkeypatch
) -> None:
    """"The task exists" is not ready: a getUpdates that never comes back is a stalled
    poller after its staleness bound, named on /readyz."""
    stack = make_stack()
    conn = await stack.start()
    await fake.wait_until(lambda: conn.polls >= 1, within=10)
    assert conn.bot is not None
    hang = asyncio.Event()

    async def never(_self: Any, **_kw: Any) -> list[Any]:
        await hang.wait()
        return []

    monkeypatch.setattr(type(conn.bot), "get_raw_updates", never)
    conn.intake_health.stale_after_s = 0.3
    daemon = stack.daemon
    assert daemon is not None and daemon.health is not None
    for _ in range(200):
        ready, checks = await daemon.health.readiness()
        if not checks["telegram.intake"]["ok"]:
            break
        await asyncio.sleep(0.05)
    assert not ready
    assert "stalled" in checks["telegram.intake"]["detail"], checks
    hang.set()


async def test_a_pump_pass_that_fails_on_the_store_is_retried(make_stack, fake) -> None:
    stack = make_stack()
    conn = await stack.start()
    layer = conn.layer
    assert layer is not None
    outage = _Outage()
    layer.inbound.claim_batch = outage.wrap(layer.inbound.claim_batch)  # type: ignore[method-assign]
    with structlog.testing.capture_logs() as logs:
        outage.on = True
        await fake.wait_until(lambda: outage.hits >= 2, within=10)
        daemon = stack.daemon
        assert daemon is not None and daemon.health is not None
        _ready, checks = await daemon.health.readiness()
        assert checks["telegram.pump"]["ok"] is False, checks
        outage.on = False
    failed = [e for e in logs if e["event"] == "channel.pump_failed"]
    assert failed and failed[0]["error_class"] == "OperationalError"
    fake.user_says(CHAT, "@geode_bot pumped", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: pumped"), within=15)
    # up again, and kept fresh by its passes (reported as data, no beat() call per pass):
    # a bound shorter than a few passes still finds it making progress
    pump = layer.supervisor.component("telegram.pump")
    pump.stale_after_s = 1.0
    before = pump.last_beat
    await fake.wait_until(lambda: pump.last_beat != before, within=10)
    await asyncio.sleep(1.2)
    _ready, checks = await daemon.health.readiness()
    assert checks["telegram.pump"] == {"ok": True, "detail": "pumping"}, checks



# -- logs that do not drown (#38 finding 5) -----------------------------------------------


def test_a_traceback_is_shown_once_per_distinct_error_per_minute() -> None:
    """A store outage used to print a ~115-line traceback per failed job (~2,300 lines for
    a 0.24 s PostgreSQL restart). Every failure still gets its one line with the error
    class; the traceback of the same error (event, class, place raised) once a minute."""
    import io

    from geode.logging import TracebackThrottle

    now = [0.0]
    throttle = TracebackThrottle(window_s=60.0, clock=lambda: now[0])
    out = io.StringIO()
    logger = structlog.wrap_logger(
        structlog.PrintLogger(out),
        processors=[throttle, structlog.processors.format_exc_info,
                    structlog.processors.KeyValueRenderer(key_order=["event"])])

    def fail(where: str) -> None:
        if where == "claim":
            raise OperationalError("SELECT", {}, ConnectionRefusedError("gone"))
        raise TimeoutError("slow")

    for _ in range(50):
        try:
            fail("claim")
        except OperationalError:
            logger.warning("channel.pump_failed", exc_info=True)
    try:
        fail("other")
    except TimeoutError:
        logger.warning("channel.pump_failed", exc_info=True)  # another error: its own
    lines = out.getvalue().splitlines()
    assert sum(line.startswith("event='channel.pump_failed'") for line in lines) == 51
    assert out.getvalue().count("Traceback (most recent call last)") == 2
    assert out.getvalue().count("error_class='OperationalError'") == 50
    assert out.getvalue().count("traceback='repeated; shown at most once per 60s'") == 49
    now[0] = 61.0  # a minute on: the same error shows its traceback again
    try:
        fail("claim")
    except OperationalError:
        logger.warning("channel.pump_failed", exc_info=True)
    assert out.getvalue().count("Traceback (most recent call last)") == 3


async def test_the_store_readiness_logs_its_transitions_not_every_probe(
    make_stack, fake
) -> None:
    stack = make_stack()
    await stack.start()
    daemon = stack.daemon
    assert daemon is not None and daemon.runtime is not None and daemon.health is not None
    store = daemon.runtime.store
    answers = iter([False] * 10 + [True] * 3)

    async def ping() -> bool:
        return next(answers)

    store.ping = ping  # type: ignore[method-assign]
    with structlog.testing.capture_logs() as logs:
        for _ in range(13):
            await daemon.health.readiness()
    names = [e["event"] for e in logs if e["event"].startswith("store.")]
    assert names == ["store.down", "store.up"], names
