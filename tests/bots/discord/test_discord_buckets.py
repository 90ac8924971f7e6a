"""discord.py's rate-limit bucket sweeps, throttled: every Discord thread is a channel with
buckets of its own, and an unthrottled sweep scanned the whole table per new bucket."""

from __future__ import annotations

import asyncio

import pytest
from discord.http import HTTPClient, Ratelimit

from bots.discord._gateway import _throttle_bucket_sweeps


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen = [0]
    real = Ratelimit.is_inactive

    def counted(self: Ratelimit) -> bool:
        seen[0] += 1
        return real(self)

    monkeypatch.setattr(Ratelimit, "is_inactive", counted)
    return seen


async def _http() -> HTTPClient:
    return HTTPClient(asyncio.get_running_loop())


async def test_new_buckets_in_many_threads_do_not_each_sweep_the_table(scans: list[int]) -> None:
    plain, throttled = await _http(), await _http()
    _throttle_bucket_sweeps(throttled)
    for http in (plain, throttled):
        for i in range(400):  # a reply in each of 400 new threads: a new bucket each
            http.get_ratelimit(f"POST /channels/{i}/messages")
    unthrottled_scans = scans[0]
    scans[0] = 0
    for i in range(400, 800):
        throttled.get_ratelimit(f"POST /channels/{i}/messages")
    # Unthrottled: every bucket from the 256th on scanned the table (~45,000 checks).
    assert unthrottled_scans > 40_000
    assert scans[0] <= 800  # throttled: at most one sweep in the interval


async def test_a_due_sweep_still_drops_inactive_buckets() -> None:
    http = await _http()
    loop = asyncio.get_running_loop()
    for i in range(300):
        http.get_ratelimit(f"POST /channels/{i}/messages")
    for bucket in http._buckets.values():
        bucket._last_request = loop.time() - 301  # idle past discord.py's 300 s
    _throttle_bucket_sweeps(http, every_s=0.0)  # a sweep is due at once
    http.get_ratelimit("POST /channels/new/messages")  # a new bucket: the sweep runs
    assert list(http._buckets) == ["POST /channels/new/messages"]
