"""Issue #30 finding 10, pairing: one sender cannot mint a code every hour forever (its codes
expire hourly): at most ``max_per_sender_per_day`` in 24 hours; other senders keep theirs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bots.store.pairing import CODE_TTL_S, SENDER_WINDOW_S, PairingStore
from geode.store import open_store


@pytest.fixture
async def pairing(tmp_path: Path) -> AsyncIterator[PairingStore]:
    async with await open_store(f"sqlite:///{tmp_path / 'geode.db'}") as store:
        yield PairingStore(store=store)


async def test_codes_per_sender_are_capped_per_day(pairing: PairingStore) -> None:
    t0 = 1_800_000_000
    got = []
    for hour in range(10):  # each code expired before the next message
        got.append(await pairing.issue(platform="telegram", sender="99", sender_name="x",
                                       channel="-1", now=t0 + hour * (CODE_TTL_S + 1)))
    assert [c is not None for c in got] == [True] * 3 + [False] * 7
    # someone else is not held back by it
    assert await pairing.issue(platform="telegram", sender="100", sender_name="y",
                               channel="-1", now=t0 + 10 * CODE_TTL_S) is not None
    # a day later the sender may ask again
    assert await pairing.issue(platform="telegram", sender="99", sender_name="x",
                               channel="-1", now=t0 + SENDER_WINDOW_S + 4 * CODE_TTL_S)
