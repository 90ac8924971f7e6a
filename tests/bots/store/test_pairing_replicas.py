"""Pairing across replicas: two daemons on one store seeing the same unknown sender at once
(in two threads, each on another replica) issue one code, not two; senders arriving at once
at the hourly cap get exactly the codes the cap allows."""

from __future__ import annotations

import asyncio
import uuid

from bots.store import PairingStore
from geode.store import open_store


async def test_concurrent_replicas_issue_one_code_per_sender(store_url: str) -> None:
    sender = f"u{uuid.uuid4().hex[:8]}"  # the PostgreSQL variant shares one database
    a, b = await open_store(store_url), await open_store(store_url, migrate=False)
    try:
        stores = [PairingStore(store=a), PairingStore(store=b)]
        codes = await asyncio.gather(*(
            stores[i % 2].issue(platform="telegram", sender=sender, sender_name="eve",
                                channel="-100")
            for i in range(8)
        ))
        assert len([c for c in codes if c is not None]) == 1, codes
        pending = [r for r in await stores[0].list(status="pending") if r.sender == sender]
        assert len(pending) == 1
    finally:
        await a.aclose()
        await b.aclose()


async def test_concurrent_replicas_keep_the_hourly_cap_exactly(store_url: str) -> None:
    platform = f"p{uuid.uuid4().hex[:8]}"  # the cap counts a platform's codes; a fresh one
    a, b = await open_store(store_url), await open_store(store_url, migrate=False)
    try:
        stores = [PairingStore(store=s, max_new_per_hour=3) for s in (a, b)]
        codes = await asyncio.gather(*(
            stores[i % 2].issue(platform=platform, sender=f"u{i}", sender_name="eve",
                                channel="-100")
            for i in range(12)
        ))
        assert len([c for c in codes if c is not None]) == 3, codes
    finally:
        await a.aclose()
        await b.aclose()
