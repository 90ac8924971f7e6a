"""Check 6 lends the request's lane slots out while ANY approver waits for a person (a
terminal's prompt, a thin CLI's, a channel's approvers): the approver itself never touches
the lanes, and another session runs meanwhile."""

from __future__ import annotations

import asyncio

from exec_helpers import HarnessFactory

from geode.daemon.lanes import LaneQueue
from geode.executor.decisions import ApprovalRequest


class WaitingTerminal:
    """A terminal approver: answers once the person types (``answer`` is set)."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()

    async def __call__(self, request: ApprovalRequest) -> str:
        self.asked.set()
        await self.answer.wait()
        return "allow"


async def test_a_terminal_approver_waiting_holds_no_lane_slot(harness: HarnessFactory) -> None:
    lanes = LaneQueue(global_cap=1, caps={"cli": 1}, wait_timeout_s=30)
    person = WaitingTerminal()
    h = harness(mode="REPL", approver=person)

    async def asking_turn() -> bool:
        async with lanes.acquire("s1", kind="cli"):
            res = await h.run_one("write_file")
            assert lanes.stats.running == 1  # its slots are back once the person answered
            return res.is_error

    turn = asyncio.create_task(asking_turn())
    await asyncio.wait_for(person.asked.wait(), 5)
    # the only global (and cli) slot is free while the person has not answered
    async with asyncio.timeout(5), lanes.acquire("s2", kind="cli"):
        assert lanes.stats.running == 1
    person.answer.set()
    assert await asyncio.wait_for(turn, 5) is False
    assert h.rec.calls and lanes.stats.running == 0


async def test_outside_a_lane_the_approval_waits_as_before(harness: HarnessFactory) -> None:
    person = WaitingTerminal()
    h = harness(mode="REPL", approver=person)
    turn = asyncio.create_task(h.run_one("write_file"))
    await asyncio.wait_for(person.asked.wait(), 5)
    person.answer.set()
    assert not (await asyncio.wait_for(turn, 5)).is_error
