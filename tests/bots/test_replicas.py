"""Two ``geode serve`` replicas on one store and one bot token, active-active: one polls
Telegram, both process; each thread runs on one replica at a time (per-thread leases), and
a replica that dies has its threads taken over, exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bots.testing.telegram import FakeTelegramServer
from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import CHAT, Stack, echo, finals, store_url_for, user_messages


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_url(request: pytest.FixtureRequest, home: Path) -> str:
    """The replicas' one store (PostgreSQL: the deployment's shared store)."""
    if request.param == "sqlite":
        return store_url_for(home)
    return str(request.getfixturevalue("pg_store_url"))


async def _replicas(
    make_stack: Callable[..., Stack], fake: FakeTelegramServer, home: Path, url: str,
    *, providers: tuple[ScriptedProvider, ScriptedProvider],
    options: tuple[dict[str, Any], dict[str, Any]] = ({}, {}),
) -> tuple[Stack, Stack]:
    first = make_stack(store_url=url, provider=providers[0], options=options[0])
    await first.start()
    home2 = home / "replica2"
    home2.mkdir()
    second = make_stack(store_url=url, provider=providers[1], options=options[1])
    second.home = home2
    c2 = await second.start()
    await fake.wait_until(lambda: c2.standby, within=10)  # one poller: the first
    return first, second


async def test_both_replicas_answer_and_a_thread_stays_on_one(
    shared_url: str, make_stack: Callable[..., Stack], fake: FakeTelegramServer, home: Path
) -> None:
    # Each replica runs one thread at a time: four threads need both.
    one_at_a_time = {"max_concurrent_threads": 1, "lease_ttl_s": 10.0}
    first, second = await _replicas(
        make_stack, fake, home, shared_url,
        providers=(ScriptedProvider([echo], repeat_last=True, latency=0.5),
                   ScriptedProvider([echo], repeat_last=True, latency=0.5)),
        options=(one_at_a_time, one_at_a_time),
    )
    mids = {i: fake.message_id_for(fake.user_says(CHAT, f"@geode_bot q{i}", from_user=42))
            for i in range(4)}
    await fake.wait_until(lambda: all(finals(fake, f"answer to: q{i}") for i in range(4)),
                          within=20)
    assert all(len(finals(fake, f"answer to: q{i}")) == 1 for i in range(4))
    assert len(first.provider.calls) >= 1 and len(second.provider.calls) >= 1
    assert len(first.provider.calls) + len(second.provider.calls) == 4
    c1, c2 = first.connector, second.connector
    assert c1 is not None and c2 is not None and c1.layer is not None
    assert c1.polls > 0 and c2.polls == 0

    # A follow-up in a thread the standby answered is answered there again, in its session.
    holders = await c1.layer.thread_leases.holders("telegram", c1.workspace)
    i = next(i for i in range(4) if holders.get((str(CHAT), str(mids[i]))) == c2.owner)
    before = len(second.provider.calls), len(first.provider.calls)
    fake.user_says(CHAT, f"more on q{i}", from_user=42, reply_to=mids[i])
    await fake.wait_until(lambda: finals(fake, f"answer to: more on q{i}"), within=15)
    assert (len(second.provider.calls), len(first.provider.calls)) == (before[0] + 1,
                                                                       before[1])
    restored = await first.store.checkpointer(f"telegram:123456:{CHAT}:{mids[i]}").load()
    assert [t.rsplit("): ", 1)[-1] for t in user_messages(restored.messages)] == [
        f"q{i}", f"more on q{i}"]


async def test_a_killed_replicas_running_turn_is_taken_over_exactly_once(
    shared_url: str, make_stack: Callable[..., Stack], fake: FakeTelegramServer, home: Path
) -> None:
    first, second = await _replicas(
        make_stack, fake, home, shared_url,
        providers=(ScriptedProvider([echo], repeat_last=True, latency=1.0),
                   ScriptedProvider([echo], repeat_last=True, latency=1.0)),
    )
    fake.user_says(CHAT, "@geode_bot slow one", from_user=42)
    stacks = (first, second)
    await fake.wait_until(lambda: any(s.provider.calls for s in stacks), within=10)
    victim = next(s for s in stacks if s.provider.calls)
    survivor = second if victim is first else first
    c = victim.connector
    assert c is not None and c.layer is not None and c.lease is not None

    # kill -9: nothing is released; the survivor waits for the leases to expire
    async def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    c.layer.thread_leases.release_all = nothing  # type: ignore[method-assign]
    c.lease.release = nothing  # type: ignore[method-assign]
    await victim.crash()

    await fake.wait_until(lambda: finals(fake, "answer to: slow one"), within=20)
    fake.user_says(CHAT, "@geode_bot after the kill", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: after the kill"), within=20)
    await asyncio.sleep(0.5)
    assert len(finals(fake, "answer to: slow one")) == 1
    assert len(victim.provider.calls) == 1  # it died inside the model call
    assert len(survivor.provider.calls) == 2  # the taken-over turn, and the new message
    assert survivor.daemon is not None
    metrics = survivor.daemon.metrics.render().decode()
    assert 'geode_channel_thread_takeovers_total{platform="telegram"} 1.0' in metrics
    assert all(call.status == 200 for call in fake.calls_to("getUpdates"))  # no 409


async def test_after_a_stall_its_own_stopped_turns_are_recovered(
    make_stack: Callable[..., Stack], fake: FakeTelegramServer
) -> None:
    stack = make_stack(provider=ScriptedProvider([echo], repeat_last=True, latency=0.5))
    c = await stack.start()
    assert c.layer is not None
    layer = c.layer
    fake.user_says(CHAT, "@geode_bot during a stall", from_user=42)
    await fake.wait_until(lambda: stack.provider.calls, within=10)
    # what the heartbeat does when it could not renew for a TTL: stop the running turns
    layer.keeper.stalled = True
    await layer.processor.aclose()
    assert layer.processor.busy == 0
    await layer.heartbeat_once()  # renewed again: nobody took the thread, so recover it
    await fake.wait_until(lambda: finals(fake, "answer to: during a stall"), within=10)
    await asyncio.sleep(0.3)
    assert len(finals(fake, "answer to: during a stall")) == 1
    assert len(stack.provider.calls) == 2  # the stopped call, and the recovered one


async def test_a_thread_taken_over_while_stalled_stops_running_here(
    make_stack: Callable[..., Stack], fake: FakeTelegramServer
) -> None:
    from sqlalchemy import update

    from bots.store._tables import thread_leases_table as t

    stack = make_stack(provider=ScriptedProvider([echo], repeat_last=True, latency=2.0))
    c = await stack.start()
    assert c.layer is not None
    layer = c.layer
    fake.user_says(CHAT, "@geode_bot taken from me", from_user=42)
    await fake.wait_until(lambda: stack.provider.calls, within=10)
    assert layer.processor.busy == 1
    # another replica took the thread over (our lease had expired while we stalled)
    stmt = update(t).values(owner="another-replica")
    await stack.store.run_write(lambda conn: conn.execute(stmt))
    await layer.heartbeat_once()
    assert layer.processor.busy == 0  # it runs there now, not here as well
    assert stack.daemon is not None
    metrics = stack.daemon.metrics.render().decode()
    assert 'geode_channel_thread_leases_lost_total{platform="telegram"} 1.0' in metrics
    assert 'geode_channel_threads_held{platform="telegram"} 0.0' in metrics
    await asyncio.sleep(2.5)
    assert not finals(fake, "answer to: taken from me")


async def test_postgres_wakes_the_other_replica_at_once(
    pg_store_url: str, make_stack: Callable[..., Stack], fake: FakeTelegramServer, home: Path
) -> None:
    # Each replica runs one thread at a time, and the second would look for work only
    # every 30 s: a notification from the poller's record (PostgreSQL NOTIFY) is what
    # makes it take a thread now.
    first, second = await _replicas(
        make_stack, fake, home, pg_store_url,
        providers=(ScriptedProvider([echo], repeat_last=True, latency=3.0),
                   ScriptedProvider([echo], repeat_last=True, latency=3.0)),
        options=({"max_concurrent_threads": 1},
                 {"max_concurrent_threads": 1, "pump_interval_s": 30.0}),
    )
    await asyncio.sleep(0.5)  # past the second replica's first pump pass
    for i in range(3):
        fake.user_says(CHAT, f"@geode_bot n{i}", from_user=42)
    await fake.wait_until(lambda: len(first.provider.calls) == len(second.provider.calls) == 1,
                          within=2.5)  # both in their 3 s model call
    await fake.wait_until(lambda: all(finals(fake, f"answer to: n{i}") for i in range(3)),
                          within=15)


async def test_a_turn_another_run_finished_first_is_not_delivered_again(
    make_stack: Callable[..., Stack], fake: FakeTelegramServer
) -> None:
    from sqlalchemy import update

    from bots.store._tables import outbox_table as o

    stack = make_stack(provider=ScriptedProvider([echo], repeat_last=True, latency=1.0))
    await stack.start()
    fake.user_says(CHAT, "@geode_bot frozen replica", from_user=42)
    await fake.wait_until(lambda: stack.provider.calls, within=10)
    # meanwhile the replica that took the thread over answered and delivered the turn
    stmt = update(o).where(o.c.kind == "turn").values(status="sent")
    await stack.store.run_write(lambda conn: conn.execute(stmt))
    await asyncio.sleep(1.5)  # this run's model call ends, and its turn finishes
    assert not finals(fake, "answer to: frozen replica")  # only the first answer counts


async def test_a_frozen_run_writes_nothing_to_a_thread_taken_over_meanwhile(
    make_stack: Callable[..., Stack], fake: FakeTelegramServer
) -> None:
    # This replica froze past its lease in the middle of a turn; another took the thread
    # over (and is running it again, not finished yet). Waking up, this run gets on with
    # its turn before its heartbeat (every 20 s here) notices: the fence in its writes
    # keeps its final checkpoint out of the session's chain and its answer undelivered.
    from sqlalchemy import select, update

    from bots.store._tables import outbox_table as o
    from bots.store._tables import thread_leases_table as t

    stack = make_stack(provider=ScriptedProvider([echo], repeat_last=True, latency=1.0),
                       options={"lease_ttl_s": 60.0})
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot frozen past its lease",
                                             from_user=42))
    await fake.wait_until(lambda: stack.provider.calls, within=10)
    stmt = update(t).values(owner="another-replica")
    await stack.store.run_write(lambda conn: conn.execute(stmt))
    await asyncio.sleep(1.5)  # this run's model call ends, and its turn tries to finish

    assert not finals(fake, "answer to: frozen past its lease")
    restored = await stack.store.checkpointer(f"telegram:123456:{CHAT}:{mid}").load()
    assert restored is not None  # the turn's first checkpoint, from before the takeover
    assert [m.role for m in restored.messages] == ["user"]  # no answer of this run
    rows = await stack.store.run_read(
        lambda conn: conn.execute(select(o.c.status).where(o.c.kind == "turn")).all())
    assert [r.status for r in rows] == ["pending"]  # the holder's run will answer it
