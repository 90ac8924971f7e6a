"""The stop request a console leaves for the replica holding a thread, on both stores: it
marks the thread's oldest unfinished event, the holder's renewal reads it (no query of its
own), asking twice is one request, a thread with nothing unfinished has nothing to stop;
and the lease keeper stops the turn of that event only, clearing a request whose turn
ended and keeping one whose turn has not started here yet."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bots.commands import ActiveTurn
from bots.events import thread_key
from bots.lease_keeper import LeaseKeeper
from bots.store.leases import StopRequest, ThreadStops
from geode.store import Store
from tests.bots.store.test_thread_leases import _event, _finish, _pair
from tests.store.conftest import pg_url, store, store_url

__all__ = ["pg_url", "store", "store_url"]


async def test_a_stop_request_is_read_by_the_holders_renewal(store: Store) -> None:
    ws, log, a, _b = _pair(store)
    stops = ThreadStops(store=store)
    assert await stops.request("telegram", ws, "-100", "1", by="telegram:9") is None
    await log.record([(_event(ws, 1, 1), "received"), (_event(ws, 1, 2), "received")])
    claimed = await log.claim_batch("telegram", ws, owner="a", leases=a)
    first = claimed[0].id
    found = await stops.running("telegram", ws, "-100", "1")
    assert found is not None and (found.event_id, found.owner, found.stop) == (first, "a", None)
    asked = [await stops.request("telegram", ws, "-100", "1", by="telegram:9")
             for _ in range(2)]
    assert asked[0] == asked[1]
    assert asked[0] is not None and asked[0].stop == StopRequest(event_id=first,
                                                                 by="telegram:9")
    assert await a.renew("telegram", ws) == {("-100", "1")}
    assert a.stop_requests == {("-100", "1"): StopRequest(event_id=first, by="telegram:9")}
    # a newer request replaced it: clearing the old one leaves the new one
    await a.stop_handled("telegram", ws, ("-100", "1"), StopRequest(event_id=first - 1, by=""))
    await a.renew("telegram", ws)
    assert ("-100", "1") in a.stop_requests
    await a.stop_handled("telegram", ws, ("-100", "1"), a.stop_requests[("-100", "1")])
    await a.renew("telegram", ws)
    assert a.stop_requests == {}
    await _finish(store, [e.id for e in claimed])
    assert await stops.running("telegram", ws, "-100", "1") is None


@dataclass
class _Router:
    active: dict[str, ActiveTurn] = field(default_factory=dict)


@dataclass
class _Client:
    platform: str = "telegram"
    workspace: str = ""


@dataclass
class _Leases:
    stop_requests: dict[tuple[str, str], StopRequest]
    handled: list[tuple[str, str]] = field(default_factory=list)

    async def stop_handled(self, platform: str, workspace: str, thread: tuple[str, str],
                           request: StopRequest) -> None:
        self.handled.append(thread)


def _keeper(leases: _Leases, router: _Router) -> Any:
    keeper: Any = object.__new__(LeaseKeeper)  # only what stop_requested() uses
    keeper.client, keeper.thread_leases, keeper.router = _Client(), leases, router
    return keeper


async def test_the_keeper_stops_the_requested_turn_only() -> None:
    router = _Router()
    turns = {root: ActiveTurn(session_id=f"s{root}", event_id=event, started=0.0)
             for root, event in (("1", 10), ("2", 20), ("3", 30))}
    for root, turn in turns.items():
        router.active[thread_key("telegram", "", "-100", root)] = turn
    leases = _Leases(stop_requests={
        ("-100", "1"): StopRequest(event_id=10, by="x"),  # running: stopped
        ("-100", "2"): StopRequest(event_id=15, by="x"),  # its turn ended: cleared
        ("-100", "3"): StopRequest(event_id=31, by="x"),  # not started yet: kept
        ("-100", "4"): StopRequest(event_id=40, by="x"),  # nothing here yet: kept
    })
    await _keeper(leases, router).stop_requested()
    assert [t.stop_requested for t in turns.values()] == [True, False, False]
    assert sorted(leases.handled) == [("-100", "1"), ("-100", "2")]
