"""Spend caps that parallel calls cannot overshoot, and usage rows that are never lost.

Issue #30 finding 6: ``max_tokens_per_day = 60``, 15 tokens a call, 12 mentions at once as
new threads made 7 calls (105 tokens): each call checked the ledger, none counted the calls
in flight. Now each call reserves its maximum in the store before it starts (one serialised
transaction with the check, shared by threads, restarts and replicas) and settles after:
the cap is crossed by at most one call. Issue #38 finding 3: a usage row the store refused
(a PostgreSQL outage) was logged and dropped, so the caps counted less than was spent; now
it is written again until it lands.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from bots.turn import session_overrides
from geode.daemon.port import SessionOverrides
from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.loop import TerminationReason, TurnResult
from geode.providers.scripted import ScriptedProvider
from geode.settings import BindingSettings, load_settings
from geode.store import Store
from geode.store.usage import CapLimit, InFlight, Reserved, UsageFilter, UsageRecord

# a scripted text answer "ok" reports 10 input + 1 output tokens
PER_CALL = 11
NOW = datetime(2026, 12, 4, 14, 30, tzinfo=UTC).timestamp()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'home' / 'geode.db'}"
    return str(request.getfixturevalue("pg_url"))


class Replicas:
    """Runtimes on one store (each one a replica, or a restarted process)."""

    def __init__(self, tmp_path: Path, url: str, **settings: Any) -> None:
        self.home = tmp_path / "home"
        self.home.mkdir(exist_ok=True)
        self.settings, self.secrets = load_settings(
            env={"GEODE_HOME": str(self.home), "OPENAI_API_KEY": "sk-test-not-used-0123456789"},
            store={"url": url}, **settings)
        self.runtimes: list[Runtime] = []
        self.providers: list[ScriptedProvider] = []

    async def replica(self) -> Runtime:
        rt = await Runtime.create(settings=self.settings, secrets=self.secrets,
                                  clock=lambda: NOW)
        self.runtimes.append(rt)
        return rt

    async def turn(self, rt: Runtime, session: str, *, binding: BindingSettings | None = None,
                   latency: float = 0.3) -> TurnResult:
        provider = ScriptedProvider(["ok"], latency=latency)
        self.providers.append(provider)
        s = await rt.open_session(SessionContext(
            mode="DAEMON" if binding else "SCHEDULER", workspace=self.home, session_id=session,
            overrides=session_overrides(binding) if binding else SessionOverrides(),
            source=binding.platform if binding else "", user="42", thread=session,
            provider=provider))
        return await s.run("hello")

    def calls(self) -> int:
        return sum(len(p.calls) for p in self.providers)

    async def aclose(self) -> None:
        for rt in self.runtimes:
            await rt.aclose()


@pytest.fixture
async def made() -> AsyncIterator[list[Replicas]]:
    out: list[Replicas] = []
    yield out
    for r in out:
        await r.aclose()


def _store(rt: Runtime) -> Store:
    assert rt.store is not None
    return rt.store


async def _tokens_today(store: Store) -> tuple[int, int]:
    (t,) = await store.usage.totals([UsageFilter()])
    return t.calls, t.tokens


async def test_twelve_threads_at_once_cannot_overshoot_the_daily_cap(
    store_url: str, tmp_path: Path, made: list[Replicas]
) -> None:
    """The finding, at the loop's model-call site: 12 new threads at once against a cap of
    four calls. Before: every call saw 0 used and started (12 calls, 132 tokens)."""
    r = Replicas(tmp_path, store_url, budgets={"max_tokens_per_day": 4 * PER_CALL})
    made.append(r)
    rt = await r.replica()
    results = await asyncio.gather(*(r.turn(rt, f"s-{i}") for i in range(12)))

    assert r.calls() == 4, [len(p.calls) for p in r.providers]
    assert await _tokens_today(_store(rt)) == (4, 4 * PER_CALL)  # never above the cap
    refused = [x for x in results if x.termination == TerminationReason.SPEND_CAP]
    assert len(refused) == 8
    assert all("44 tokens of 44 tokens used today" in x.detail for x in refused)
    assert await _store(rt).run_read(  # every reservation settled
        lambda c: c.exec_driver_sql("SELECT count(*) FROM spend_reservations").scalar()) == 0


@pytest.mark.postgres
async def test_two_replicas_share_the_reservations(
    pg_url: str, tmp_path: Path, made: list[Replicas]
) -> None:
    b = BindingSettings(platform="telegram", channel="-1", max_tokens_per_day=3 * PER_CALL)
    r = Replicas(tmp_path, pg_url)
    made.append(r)
    a, other = await r.replica(), await r.replica()  # two processes' runtimes, one database
    results = await asyncio.gather(*(r.turn(a if i % 2 else other, f"s-{i}", binding=b)
                                     for i in range(10)))
    assert r.calls() == 3
    assert await _tokens_today(_store(a)) == (3, 3 * PER_CALL)
    assert sum(x.termination == TerminationReason.SPEND_CAP for x in results) == 7


async def test_calls_run_in_parallel_while_their_maxima_fit_under_the_cap(
    store_url: str, tmp_path: Path, made: list[Replicas]
) -> None:
    """Reserving does not serialise calls that all fit: six calls, each at most its input
    + 8,192 output tokens, under a cap of 200,000 are all in flight at once."""
    r = Replicas(tmp_path, store_url, budgets={"max_tokens_per_day": 200_000})
    made.append(r)
    rt = await r.replica()
    in_flight = [0, 0]  # now, peak
    all_in = asyncio.Event()

    async def turn(i: int) -> TurnResult:
        provider = ScriptedProvider(["ok"])
        answer = provider.complete

        async def complete(request: Any) -> Any:  # each call waits until all six are in
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
            if in_flight[1] == 6:
                all_in.set()
            try:
                await asyncio.wait_for(all_in.wait(), 15)
                return await answer(request)
            finally:
                in_flight[0] -= 1

        provider.complete = complete  # type: ignore[method-assign]
        s = await rt.open_session(SessionContext(
            mode="SCHEDULER", workspace=r.home, session_id=f"s-{i}",
            overrides=SessionOverrides(), provider=provider))
        return await s.run("hello")

    results = await asyncio.gather(*(turn(i) for i in range(6)), return_exceptions=True)
    assert in_flight[1] == 6, results
    assert all(isinstance(x, TurnResult) and x.ok for x in results), results


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


async def test_a_dead_process_reservation_is_counted_in_full_on_takeover(
    store_url: str, tmp_path: Path, made: list[Replicas]
) -> None:
    """A serve killed -9 during a call leaves its reservation: the restart (same host, the
    pid gone) settles it at its reserved size at once, never waits for it, never drops it."""
    from geode.daemon.spend import holder_alive, process_holder

    r = Replicas(tmp_path, store_url, budgets={"max_tokens_per_day": 1_000_000})
    made.append(r)
    rt = await r.replica()
    store = _store(rt)
    dead = f"{socket.gethostname()}:{_dead_pid()}:1"
    assert not holder_alive(dead) and holder_alive(process_holder())
    assert holder_alive(f"other-host:{os.getpid()}:1")  # another host's: expiry decides
    got = await store.usage.reserve(
        UsageRecord(session_id="crashed", input_tokens=900, output_tokens=8192, model="m"),
        [CapLimit(counts=UsageFilter(), limit=1_000_000)], holder=dead,
        now_ms=int(NOW * 1000), ttl_ms=900_000, alive=lambda h: True)
    assert isinstance(got, Reserved)

    result = await asyncio.wait_for(r.turn(rt, "after-restart"), 30)
    assert result.ok
    # the dead call counted in full (the most it can have spent), the new one as reported
    assert await _tokens_today(store) == (2, 900 + 8192 + PER_CALL)


def _fail_usage_writes(store: Store, monkeypatch: pytest.MonkeyPatch, times: int,
                       until: asyncio.Event | None = None) -> list[str]:
    """The store refuses the usage row's writes ``times`` times, or until ``until`` is set
    (a connection error, as in a PostgreSQL restart); every other write goes through."""
    failures: list[str] = []

    def refuse(fn: Callable[..., Any]) -> bool:
        more = not until.is_set() if until is not None else len(failures) < times
        if "UsageLedger.record" in fn.__qualname__ and more:
            failures.append(fn.__qualname__)
            return True
        return False

    def error() -> OperationalError:
        return OperationalError("INSERT INTO usage_ledger", {},
                                ConnectionError("server closed the connection"))

    real_later, real_write = store.run_write_later, store.run_write

    async def run_write_later(fn: Callable[..., Any], *, on_error: Any) -> None:
        if refuse(fn):
            on_error(error())
            return
        await real_later(fn, on_error=on_error)

    async def run_write(fn: Callable[..., Any]) -> Any:
        if refuse(fn):
            raise error()
        return await real_write(fn)

    monkeypatch.setattr(store, "run_write_later", run_write_later)
    monkeypatch.setattr(store, "run_write", run_write)
    return failures


@pytest.mark.parametrize("capped", [False, True])
async def test_a_usage_row_the_store_refuses_is_written_again_until_it_lands(
    store_url: str, tmp_path: Path, made: list[Replicas], monkeypatch: pytest.MonkeyPatch,
    capped: bool,
) -> None:
    budgets = {"max_tokens_per_day": 1_000_000} if capped else {}
    r = Replicas(tmp_path, store_url, budgets=budgets)
    made.append(r)
    rt = await r.replica()
    store = _store(rt)
    failures = _fail_usage_writes(store, monkeypatch, times=3)
    assert (await r.turn(rt, "s-1", latency=0)).ok
    await asyncio.wait_for(store.usage.settled(), 30)
    assert len(failures) == 3  # refused three times: the first write and two retries
    assert await _tokens_today(store) == (1, PER_CALL)  # and then it landed, once
    assert await store.run_read(
        lambda c: c.exec_driver_sql("SELECT count(*) FROM spend_reservations").scalar()) == 0


async def test_while_a_usage_row_is_being_retried_its_reservation_still_counts(
    store_url: str, tmp_path: Path, made: list[Replicas], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between the refused write and its retry the caps never count less than was spent:
    the call's reservation (its maximum) holds the place of its row."""
    r = Replicas(tmp_path, store_url, budgets={"max_tokens_per_day": 1_000_000})
    made.append(r)
    rt = await r.replica()
    store = _store(rt)
    back = asyncio.Event()  # the store is "down" for the usage row until this is set
    failures = _fail_usage_writes(store, monkeypatch, times=0, until=back)
    assert (await r.turn(rt, "s-1", latency=0)).ok
    await asyncio.sleep(1.0)  # a few retries refused
    assert failures
    held = await store.run_read(lambda c: c.exec_driver_sql(
        "SELECT input_tokens + output_tokens FROM spend_reservations").scalars().all())
    assert len(held) == 1 and held[0] >= PER_CALL
    (counted,) = await store.usage.totals([UsageFilter()])
    assert counted.calls == 0  # the row is not written yet; the reservation holds its place
    back.set()
    await asyncio.wait_for(store.usage.settled(), 30)
    assert await _tokens_today(store) == (1, PER_CALL)


async def test_another_hosts_reservation_counts_until_it_expires_then_in_full(
    store_url: str, tmp_path: Path, made: list[Replicas]
) -> None:
    """A replica on another host died mid-call: its reservation holds its place (others
    wait rather than overshoot) until it expires, then it is settled at its full size."""
    r = Replicas(tmp_path, store_url)
    made.append(r)
    store = _store(await r.replica())
    caps = [CapLimit(counts=UsageFilter(), limit=100)]
    now = int(NOW * 1000)

    from geode.daemon.spend import holder_alive

    async def reserve(holder: str, tokens: int, at: int) -> Any:
        return await store.usage.reserve(
            UsageRecord(session_id=holder, input_tokens=tokens, model="m"), caps,
            holder=holder, now_ms=at, ttl_ms=60_000, alive=holder_alive)

    assert isinstance(await reserve("other-host:7:1", 60, now), Reserved)
    waiting = await reserve(process_holder_for_test(), 60, now + 1_000)
    assert isinstance(waiting, InFlight)  # 60 held + 60 would cross 100: wait
    after = await reserve(process_holder_for_test(), 60, now + 61_000)  # expired by then
    assert isinstance(after, Reserved)
    # the dead call counted in full (60), the new one is held
    assert await _tokens_today(store) == (1, 60)


def process_holder_for_test() -> str:
    from geode.daemon.spend import process_holder

    return process_holder()


@pytest.mark.parametrize("spent", [False, True])
async def test_a_call_that_ended_without_usage_is_dropped_or_counted_in_full(
    store_url: str, tmp_path: Path, made: list[Replicas], spent: bool
) -> None:
    """A provider error: nothing billed, the reservation is dropped. A timeout after the
    request went out: it may have been billed, counted at its reserved size."""
    r = Replicas(tmp_path, store_url)
    made.append(r)
    store = _store(await r.replica())
    got = await store.usage.reserve(
        UsageRecord(session_id="s", input_tokens=30, output_tokens=70, model="m"),
        [CapLimit(counts=UsageFilter(), limit=1_000)], holder=process_holder_for_test(),
        now_ms=int(NOW * 1000), ttl_ms=60_000, alive=lambda h: True)
    assert isinstance(got, Reserved)
    await store.usage.release(got.id, at_ms=int(NOW * 1000), spent=spent)
    await store.usage.release(got.id, at_ms=int(NOW * 1000), spent=spent)  # twice: once
    assert await _tokens_today(store) == ((1, 100) if spent else (0, 0))
