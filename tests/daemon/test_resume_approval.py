"""Resume in place of a turn whose tool batch waited for a channel approval when the process
stopped: resuming the turn asks the approver again for the same call (where the channel
finds its request and resumes the wait) and the call runs once; a new turn instead closes
the open batch the old way (the call did not run) and asks nobody."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

from geode.daemon.port import SessionOverrides
from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.executor.decisions import ApprovalAnswer, ApprovalRequest
from geode.loop import TerminationReason
from geode.loop.resume import NOT_STARTED_TEXT
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings

WRITE = {"path": "notes.txt", "content": "hi\n"}


class Approvers:
    """The first process's approver never answers (it dies waiting); the next one says yes."""

    def __init__(self) -> None:
        self.asked: list[ApprovalRequest] = []
        self.waiting = asyncio.Event()

    async def never(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append(request)
        self.waiting.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def yes(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append(request)
        return ApprovalAnswer(answer="allow", note="approved by ann (43)", by="ann (43)",
                              by_id="43", by_name="ann", outcome="approved")


@contextlib.asynccontextmanager
async def _restarted(tmp_path: Path, approvers: Approvers) -> AsyncIterator[tuple[Runtime, str]]:
    """A DAEMON session whose turn t-1 waits for an approval in a runtime left for dead, and
    a second runtime on the same home (the restart): yields that runtime and the session."""
    settings, secrets = load_settings(env={"GEODE_HOME": str(tmp_path / "home")})
    dead = await Runtime.create(settings=settings, secrets=secrets)
    first = await dead.open_session(_ctx(tmp_path, ScriptedProvider(
        [ToolCall("write_file", WRITE)]), approvers.never))
    running = asyncio.create_task(first.run("write it", turn_id="t-1"))
    await asyncio.wait_for(approvers.waiting.wait(), 10)
    rt = await Runtime.create(settings=settings, secrets=secrets)
    try:
        yield rt, first.session_id
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await rt.aclose()
        await dead.aclose()


def _ctx(tmp_path: Path, provider: ScriptedProvider, approver: object,
         session_id: str | None = None) -> SessionContext:
    return SessionContext(mode="DAEMON", workspace=tmp_path, session_id=session_id or "thread-1",
                          provider=provider, approver=approver,  # type: ignore[arg-type]
                          overrides=SessionOverrides(tools=["read_file"],
                                                     approve=("write_file",)))


async def test_resuming_the_turn_asks_again_for_the_same_call_and_it_runs_once(
    tmp_path: Path,
) -> None:
    approvers = Approvers()
    async with _restarted(tmp_path, approvers) as (rt, sid):
        model = ScriptedProvider(["written"])
        second = await rt.open_session(_ctx(tmp_path, model, approvers.yes, sid))
        assert second.can_resume("t-1")
        result = await second.resume("t-1")
        assert result.termination == TerminationReason.NATURAL and result.text == "written"
        assert (tmp_path / "notes.txt").read_text() == "hi\n"
        first_ask, again = approvers.asked
        assert (again.call_id, again.turn_id) == (first_ask.call_id, "t-1")
        assert rt.store is not None
        (receipt,) = await rt.store.receipts.list_for(sid)
        assert (receipt.status, receipt.approved_by, receipt.approved_by_name) == (
            "done", "43", "ann")
        rows = [r for r in await rt.store.timeline.list(sid) if r.kind == "approval.requested"]
        assert [r.payload.get("resumed", False) for r in rows] == [False, True]


async def test_a_new_turn_closes_the_waiting_batch_as_not_run_and_asks_nobody(
    tmp_path: Path,
) -> None:
    approvers = Approvers()
    async with _restarted(tmp_path, approvers) as (rt, sid):
        model = ScriptedProvider(["fine"])
        second = await rt.open_session(_ctx(tmp_path, model, approvers.yes, sid))
        result = await second.run("something else", turn_id="t-2")
        assert result.termination == TerminationReason.NATURAL
        assert len(approvers.asked) == 1  # only the first process asked
        assert not (tmp_path / "notes.txt").exists()
        sent = json.dumps([m.model_dump() for m in model.calls[0].messages])
        assert sent.count(NOT_STARTED_TEXT[:40]) == 1
