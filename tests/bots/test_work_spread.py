"""Work spreads across replicas (#38 finding 4): the replica whose intake records new threads
claims only what it can start soon (its channel lanes + ``queue_allowance``); the rest wait
unclaimed in the store, and the other replica claims them. Before, the polling replica took
every new thread up to ``max_concurrent_threads`` (64) and queued them behind its own lanes
while its peer sat idle."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from bots.testing.telegram import FakeTelegramServer
from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import CHAT, Stack, echo, finals

LANES = {"global_cap": 8, "channel_cap": 2}


async def test_a_burst_of_new_threads_is_shared_by_both_replicas(
    pg_store_url: str, make_stack: Callable[..., Stack], fake: FakeTelegramServer, home: Path
) -> None:
    options = {"lease_ttl_s": 10.0}
    first = make_stack(store_url=pg_store_url, lanes=LANES, options=options,
                       provider=ScriptedProvider([echo], repeat_last=True, latency=0.4))
    await first.start()
    second = make_stack(store_url=pg_store_url, lanes=LANES, options=options,
                        provider=ScriptedProvider([echo], repeat_last=True, latency=0.4))
    second.home = home / "replica2"
    second.home.mkdir()
    c2 = await second.start()
    await fake.wait_until(lambda: c2.standby, within=10)  # the first one polls

    n = 12
    for i in range(n):
        fake.user_says(CHAT, f"@geode_bot q{i}", from_user=42)
    c1 = first.connector
    assert c1 is not None and c1.layer is not None
    most = 0

    def all_answered() -> bool:
        return all(finals(fake, f"answer to: q{i}") for i in range(n))

    async def watch() -> bool:
        nonlocal most
        assert c1 is not None and c1.layer is not None
        most = max(most, c1.layer.processor.busy)  # threads running or waiting here
        return all_answered()

    async with asyncio.timeout(40):
        while not await watch():
            await asyncio.sleep(0.05)

    for i in range(n):
        assert len(finals(fake, f"answer to: q{i}")) == 1, i
    ran = (len(first.provider.calls), len(second.provider.calls))
    assert sum(ran) == n
    # both replicas ran turns: the idle one took what the poller could not start soon
    assert min(ran) >= 3, ran
    # the poller never took more threads than its lanes + the queue allowance
    assert most <= LANES["channel_cap"] + 2, most
