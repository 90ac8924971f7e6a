"""Spend caps ([budgets] and per binding) against the durable usage ledger, on SQLite and
PostgreSQL: a reached cap never starts the model call; the day boundary (an injected clock,
in the configured time zone) lifts a daily cap; per-thread and per-user caps; two replicas on
one PostgreSQL store share the ledger; ``geode usage`` reports the figures."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bots.turn import session_overrides
from geode.cli.app import _register, app
from geode.daemon.metrics import DaemonMetrics
from geode.daemon.port import SessionOverrides
from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.errors import ConfigError
from geode.hooks.events import ObservedEvent, SpendCapReached, UsageRecorded
from geode.logging import configure_logging
from geode.loop import TerminationReason, TurnResult
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import BindingSettings, load_settings

_register()  # the command modules add themselves to `app`

# a scripted text answer "ok" reports 10 input + 1 output tokens
PER_CALL = 11


class Clock:
    def __init__(self, when: datetime) -> None:
        self.now = when.timestamp()

    def __call__(self) -> float:
        return self.now

    def set(self, when: datetime) -> None:
        self.now = when.timestamp()


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'home' / 'geode.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime(2026, 12, 4, 14, 30, tzinfo=UTC))


class Rig:
    """Runtimes (replicas) on one store, each turn with a fresh scripted model."""

    def __init__(self, tmp_path: Path, store_url: str, clock: Clock, **settings: Any) -> None:
        self.home = tmp_path / "home"
        self.home.mkdir(exist_ok=True)
        self.settings, self.secrets = load_settings(
            env={"GEODE_HOME": str(self.home), "OPENAI_API_KEY": "sk-test-not-used-0123456789"},
            store={"url": store_url}, **settings)
        self.clock = clock
        self.runtimes: list[Runtime] = []
        self.providers: list[ScriptedProvider] = []

    async def replica(self) -> Runtime:
        rt = await Runtime.create(settings=self.settings, secrets=self.secrets, clock=self.clock)
        self.runtimes.append(rt)
        return rt

    async def turn(self, rt: Runtime, *, session: str, script: list[Any] | None = None,
                   binding: BindingSettings | None = None, user: str | None = None,
                   thread: str | None = None) -> TurnResult:
        provider = ScriptedProvider(script or ["ok"])
        self.providers.append(provider)
        s = await rt.open_session(SessionContext(
            mode="DAEMON" if binding else "SCHEDULER", workspace=self.home, session_id=session,
            # what a channel turn passes (bots.turn): the binding as neutral overrides
            overrides=session_overrides(binding) if binding else SessionOverrides(),
            source=binding.platform if binding else "", user=user, thread=thread,
            provider=provider))
        return await s.run("hello")

    async def aclose(self) -> None:
        for rt in self.runtimes:
            await rt.aclose()


@pytest.fixture
async def rigs() -> AsyncIterator[list[Rig]]:
    made: list[Rig] = []
    yield made
    for r in made:
        await r.aclose()


def _rig(rigs: list[Rig], *args: Any, **kw: Any) -> Rig:
    rig = Rig(*args, **kw)
    rigs.append(rig)
    return rig


async def _kinds(rt: Runtime, session: str) -> list[str]:
    assert rt.store is not None
    return [r.kind for r in await rt.store.timeline.list(session)]


async def test_daily_token_cap_refuses_the_call_then_the_next_day_lifts_it(
    store_url: str, tmp_path: Path, clock: Clock, rigs: list[Rig]
) -> None:
    rig = _rig(rigs, tmp_path, store_url, clock, budgets={"max_tokens_per_day": 20})
    rt = await rig.replica()
    assert (await rig.turn(rt, session="s-1")).ok
    assert (await rig.turn(rt, session="s-2")).ok  # 11 used < 20: may start, crosses to 22
    refused = await rig.turn(rt, session="s-3")
    assert refused.termination == TerminationReason.SPEND_CAP
    assert rig.providers[-1].calls == []  # the model got no request for it
    assert ("max_tokens_per_day (daemon) reached: 22 tokens of 20 tokens used today"
            in refused.detail)
    assert "resets at 2026-12-05 00:00 UTC" in refused.detail
    assert "spend.cap_reached" in await _kinds(rt, "s-3")

    clock.set(datetime(2026, 12, 5, 0, 0, 1, tzinfo=UTC))  # the next day
    again = await rig.turn(rt, session="s-3")
    assert again.ok and len(rig.providers[-1].calls) == 1

    assert rt.store is not None
    days = await rt.store.usage.report(by="day", tz="UTC")
    assert [(d, t.calls, t.tokens) for d, t in days] == [
        ("2026-12-04", 2, 2 * PER_CALL), ("2026-12-05", 1, PER_CALL)]


async def test_the_day_starts_at_midnight_in_the_configured_time_zone(
    store_url: str, tmp_path: Path, clock: Clock, rigs: list[Rig]
) -> None:
    # 14:30 UTC is 23:30 in Tokyo; 15:30 UTC is already the next day there
    rig = _rig(rigs, tmp_path, store_url, clock,
               budgets={"max_tokens_per_day": 5, "timezone": "Asia/Tokyo"})
    rt = await rig.replica()
    assert (await rig.turn(rt, session="s-1")).ok
    refused = await rig.turn(rt, session="s-1")
    assert refused.termination == TerminationReason.SPEND_CAP
    assert "resets at 2026-12-05 00:00 JST" in refused.detail
    clock.set(datetime(2026, 12, 4, 15, 30, tzinfo=UTC))
    assert (await rig.turn(rt, session="s-1")).ok


async def test_per_thread_cap_counts_the_thread_and_never_resets(
    store_url: str, tmp_path: Path, clock: Clock, rigs: list[Rig]
) -> None:
    b = BindingSettings(platform="telegram", channel="-1", max_tokens_per_thread=10)
    rig = _rig(rigs, tmp_path, store_url, clock)
    rt = await rig.replica()
    assert (await rig.turn(rt, session="s-a", binding=b, user="42", thread="T1")).ok
    # /new in the thread: another session, the same thread
    refused = await rig.turn(rt, session="s-b", binding=b, user="42", thread="T1")
    assert refused.termination == TerminationReason.SPEND_CAP
    assert "max_tokens_per_thread (binding telegram:-1)" in refused.detail
    assert "does not reset" in refused.detail
    assert (await rig.turn(rt, session="s-c", binding=b, user="42", thread="T2")).ok
    clock.set(datetime(2026, 12, 9, tzinfo=UTC))
    again = await rig.turn(rt, session="s-b", binding=b, user="42", thread="T1")
    assert again.termination == TerminationReason.SPEND_CAP
    assert [len(p.calls) for p in rig.providers] == [1, 0, 1, 0]


async def test_per_user_daily_cap_counts_each_user_of_the_binding(
    store_url: str, tmp_path: Path, clock: Clock, rigs: list[Rig]
) -> None:
    b = BindingSettings(platform="telegram", channel="-1", max_tokens_per_user_per_day=10)
    other = BindingSettings(platform="telegram", channel="-2", max_tokens_per_user_per_day=10)
    rig = _rig(rigs, tmp_path, store_url, clock)
    rt = await rig.replica()
    assert (await rig.turn(rt, session="s-1", binding=b, user="42", thread="T1")).ok
    refused = await rig.turn(rt, session="s-2", binding=b, user="42", thread="T2")
    assert refused.termination == TerminationReason.SPEND_CAP
    assert "user 42" in refused.detail and "11 tokens of 10 tokens used today" in refused.detail
    assert (await rig.turn(rt, session="s-3", binding=b, user="43", thread="T3")).ok
    # a binding's cap counts that binding's calls only
    assert (await rig.turn(rt, session="s-4", binding=other, user="42", thread="T4")).ok


async def test_usd_caps_need_a_price_and_the_turn_cap_counts_the_turn(
    tmp_path: Path, clock: Clock, rigs: list[Rig]
) -> None:
    url = f"sqlite:///{tmp_path / 'home' / 'geode.db'}"
    rig = _rig(rigs, tmp_path, url, clock, budgets={"max_usd_per_turn": 0.02},
               model={"prices": {"scripted": (1000.0, 1000.0)}})
    rt = await rig.replica()
    tools = [ToolCall("list_dir", {"path": "."})] * 5 + ["done"]
    result = await rig.turn(rt, session="s-1", script=tools)
    # each tool call costs 15 tokens * $1000/Mtok = $0.015: the second crosses $0.02
    assert result.termination == TerminationReason.SPEND_CAP
    assert len(rig.providers[-1].calls) == 2
    assert ("max_usd_per_turn (daemon) reached: $0.0300 of $0.0200 used by this turn"
            in result.detail)
    assert (await rig.turn(rt, session="s-1")).ok  # a new turn starts again from $0
    with pytest.raises(ConfigError, match=r"max_usd_per_turn.*no price"):
        await rt.open_session(SessionContext(mode="HEADLESS", workspace=tmp_path,
                                             model="gpt-6-sol"))


async def test_two_replicas_on_postgresql_share_the_ledger(
    pg_url: str, tmp_path: Path, clock: Clock, rigs: list[Rig]
) -> None:
    b = BindingSettings(platform="telegram", channel="-1", max_tokens_per_day=10)
    rig = _rig(rigs, tmp_path, pg_url, clock)
    a, other = await rig.replica(), await rig.replica()  # two processes' runtimes, one store
    assert (await rig.turn(a, session="s-1", binding=b, user="42", thread="T1")).ok
    refused = await rig.turn(other, session="s-2", binding=b, user="43", thread="T2")
    assert refused.termination == TerminationReason.SPEND_CAP
    assert rig.providers[-1].calls == []
    # a restart (a fresh runtime on the same store) still sees the day's usage
    await a.aclose()
    rig.runtimes.remove(a)
    again = await rig.turn(await rig.replica(), session="s-3", binding=b, thread="T3")
    assert again.termination == TerminationReason.SPEND_CAP


async def test_usage_is_counted_in_prometheus_by_binding_model_and_platform(
    tmp_path: Path, clock: Clock, rigs: list[Rig]
) -> None:
    rig = _rig(rigs, tmp_path, f"sqlite:///{tmp_path / 'home' / 'geode.db'}", clock,
               model={"prices": {"scripted": (1000.0, 1000.0)}}, budgets={"max_usd_per_day": 1})
    rt = await rig.replica()
    metrics = DaemonMetrics()
    rt.observers.subscribe_events(metrics.on_event)
    b = BindingSettings(platform="slack", channel="C1")
    assert (await rig.turn(rt, session="s-1", binding=b, user="U1", thread="T1")).ok
    text = metrics.render().decode()
    labels = 'binding="slack:C1",direction="input",model="scripted",platform="slack"'
    assert f"geode_model_tokens_total{{{labels}}} 10.0" in text
    assert 'geode_model_cost_usd_total{binding="slack:C1",model="scripted",platform="slack"} ' \
           "0.011" in text


async def test_spend_events_reach_observers_as_typed_values_under_their_old_names(
    tmp_path: Path, clock: Clock, rigs: list[Rig]
) -> None:
    rig = _rig(rigs, tmp_path, f"sqlite:///{tmp_path / 'home' / 'geode.db'}", clock,
               model={"prices": {"scripted": (1000.0, 1000.0)}},
               budgets={"max_tokens_per_day": 5})
    rt = await rig.replica()
    typed: list[ObservedEvent] = []
    named: list[tuple[str, dict[str, Any]]] = []
    metrics = DaemonMetrics()
    rt.observers.subscribe_events(typed.append)
    rt.observers.subscribe_events(metrics.on_event)
    rt.observers.subscribe(lambda name, data: named.append((name, dict(data))),
                           events=r"usage\.recorded|spend\.cap_reached")
    b = BindingSettings(platform="slack", channel="C1")
    assert (await rig.turn(rt, session="s-1", binding=b, user="U1", thread="T1")).ok
    refused = await rig.turn(rt, session="s-2", binding=b, user="U1", thread="T2")
    assert refused.termination == TerminationReason.SPEND_CAP
    spend = [e for e in typed if isinstance(e, UsageRecorded | SpendCapReached)]
    assert spend == [
        UsageRecorded(session_id="s-1", binding="slack:C1", platform="slack", model="scripted",
                      input_tokens=10, output_tokens=1, cost_usd=pytest.approx(0.011)),
        SpendCapReached(session_id="s-2", cap="max_tokens_per_day", binding="slack:C1",
                        platform="slack"),
    ]
    # name-based observers (shell hooks, plugins) see the same names and payloads as before
    assert [(n, list(d)) for n, d in named] == [
        ("usage.recorded", ["session_id", "binding", "platform", "model", "input_tokens",
                            "output_tokens", "cost_usd"]),
        ("spend.cap_reached", ["session_id", "cap", "binding", "platform"]),
    ]
    text = metrics.render().decode()
    assert ('geode_spend_caps_reached_total{binding="slack:C1",cap="max_tokens_per_day",'
            'platform="slack"} 1.0') in text


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    yield CliRunner()
    configure_logging(stream=sys.stderr)


def test_geode_usage_reports_the_ledger(
    store_url: str, tmp_path: Path, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import time

    clock = Clock(datetime.fromtimestamp(time.time(), UTC))  # `geode usage` reads the real time
    rig = Rig(tmp_path, store_url, clock, model={"prices": {"scripted": (1000.0, 2000.0)}})

    async def fill() -> None:
        rt = await rig.replica()
        t1 = BindingSettings(platform="telegram", channel="-1")
        await rig.turn(rt, session="s-1", binding=t1, user="42", thread="T1")
        await rig.turn(rt, session="s-2", binding=t1, user="43", thread="T2")
        await rig.turn(rt, session="s-3")
        await rig.aclose()

    asyncio.run(fill())
    monkeypatch.setenv("GEODE_HOME", str(rig.home))
    monkeypatch.setenv("GEODE_STORE__URL", store_url)
    done = cli.invoke(app, ["usage", "--by", "binding", "--json"])
    assert done.exit_code == 0, done.output
    out = json.loads(done.output)
    rows = {r["key"]: r for r in out["rows"]}
    assert rows["telegram:-1"]["calls"] == 2 and rows["telegram:-1"]["tokens"] == 2 * PER_CALL
    assert rows["telegram:-1"]["cost_usd"] == pytest.approx(2 * (10 * 1000 + 1 * 2000) / 1e6)
    assert rows[""]["calls"] == 1
    assert out["total"]["input_tokens"] == 30 and out["total"]["output_tokens"] == 3
    by_user = json.loads(cli.invoke(app, ["usage", "--by", "user", "--json"]).output)
    users = {r["key"]: r["calls"] for r in by_user["rows"]}
    assert users == {"telegram:42": 1, "telegram:43": 1, "": 1}
    table = cli.invoke(app, ["usage", "--by", "model", "--since", "1d"])
    assert table.exit_code == 0 and "scripted" in table.output and "0.0360" in table.output
    bad = cli.invoke(app, ["usage", "--by", "planet"])
    assert bad.exit_code == 2
    assert cli.invoke(app, ["usage", "--since", "last tuesday"]).exit_code == 2
