"""The harness port: refusals in the GeodeError tree, a turn's outcome and a session's status
as typed values, the write fence and opening note given at construction, neutral
overrides, a turn's admission and ``stop_turn``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy.engine import Connection

from geode.daemon import Daemon, OpeningNote, SessionOverrides
from geode.daemon.session import SessionContext
from geode.errors import (
    GeodeError,
    LaneBusy,
    NotAdmitted,
    RunError,
    ShuttingDown,
    TurnNotStartedError,
)
from geode.loop import TerminationReason
from geode.providers.scripted import ScriptedProvider
from tests.daemon.conftest import DaemonMaker


def test_refusals_are_geode_errors() -> None:
    busy = LaneBusy(lane="global", kind="channel", waited_s=1.5)
    assert isinstance(busy, TurnNotStartedError) and isinstance(busy, RunError)
    assert isinstance(ShuttingDown(), GeodeError)
    assert "global lane" in str(busy) and busy.waited_s == 1.5
    # the old import paths still name the same classes
    from geode.daemon.ipc import ShuttingDown as ipc_shutting_down
    from geode.daemon.lanes import LaneBusy as lanes_busy

    assert ipc_shutting_down is ShuttingDown and lanes_busy is LaneBusy


def _ctx(daemon: Daemon, sid: str, **kw: Any) -> SessionContext:
    return SessionContext(mode="DAEMON", workspace=daemon.workspace, session_id=sid, **kw)


async def test_turn_outcome_and_session_status(make_daemon: DaemonMaker) -> None:
    daemon = await make_daemon(["first answer"])
    sid = "telegram:1:2:3"
    assert (await daemon.turn_outcome(sid, "t-x")).state == "not_started"
    status = await daemon.session_status(sid)
    assert not status.exists and status.last_termination is None

    result = await daemon.run_turn(_ctx(daemon, sid, overrides=SessionOverrides(model="m-1")),
                                   "hello", kind="channel", turn_id="t-one")
    assert result.ok
    outcome = await daemon.turn_outcome(sid, "t-one")
    assert outcome.state == "finished"
    assert outcome.termination == "natural" and outcome.text == "first answer"
    # another turn id than the chain's latest: not this turn
    assert (await daemon.turn_outcome(sid, "t-other")).state == "not_started"
    status = await daemon.session_status(sid)
    assert status.exists and status.model == "m-1" and status.last_termination == "natural"


async def test_fence_and_opening_note_are_given_at_construction(
    make_daemon: DaemonMaker,
) -> None:
    daemon = await make_daemon(["ok"])
    seen: list[str] = []

    class Held:  # a claim (geode.daemon.port.Claim): checked inside each write
        def check(self, tx: Connection) -> None:
            seen.append("fenced")

    fence = Held()

    note = OpeningNote(kind="channel.message", payload={"sender": "u1"}, turn_id="t-n")
    result = await daemon.run_turn(_ctx(daemon, "s-fenced", fence=fence, opening_note=note),
                                   "hi", kind="channel", turn_id="t-n")
    assert result.ok and seen  # every checkpoint of the turn ran the fence first
    assert daemon.runtime is not None and daemon.runtime.store is not None
    rows = await daemon.runtime.store.timeline.list("s-fenced")
    notes = [r for r in rows if r.kind == "channel.message"]
    assert len(notes) == 1 and notes[0].payload["sender"] == "u1"
    assert notes[0].turn_id == "t-n"


async def test_a_fence_that_refuses_stops_the_turn_unwritten(make_daemon: DaemonMaker) -> None:
    daemon = await make_daemon(["never saved"])

    class Taken(Exception):
        pass

    class Lost:
        def check(self, tx: Connection) -> None:
            raise Taken("another replica holds the thread")

    fence = Lost()

    with pytest.raises(Taken):
        await daemon.run_turn(_ctx(daemon, "s-taken", fence=fence), "hi", kind="channel",
                              turn_id="t-1")
    assert (await daemon.turn_outcome("s-taken", "t-1")).state == "not_started"


async def test_overrides_narrow_the_tools_and_add_to_the_prompt(
    make_daemon: DaemonMaker,
) -> None:
    daemon = await make_daemon(["ok"])
    assert daemon.runtime is not None and daemon.provider_factory is not None
    session = await daemon.runtime.open_session(_ctx(
        daemon, "s-over", provider=daemon.provider_factory(),
        overrides=SessionOverrides(tools=["read_file"], prompt_addition="Answer in French."),
    ))
    plan = session.loop.deps.plan_source()
    # read_result joins any non-empty allow-list: it pages back a cut result of an allowed call
    assert list(plan.tools) == ["read_file", "read_result"]
    assert "Answer in French." in session.loop.deps.system_prompt()


async def test_a_turn_not_admitted_never_opens_its_session(make_daemon: DaemonMaker) -> None:
    daemon = await make_daemon(["never said"])
    asked: list[str] = []

    async def admit() -> bool:
        asked.append("asked")
        return False  # e.g. `geode queue drop` took the message while it waited

    ctx = SessionContext(mode="DAEMON", workspace=daemon.workspace, session_id="s-dropped")
    with pytest.raises(NotAdmitted):
        await daemon.run_turn(ctx, "hi", kind="channel", turn_id="t-1", admit=admit)
    assert asked == ["asked"]
    assert (await daemon.session_status("s-dropped")).exists is False  # never opened
    assert (await daemon.turn_outcome("s-dropped", "t-1")).state == "not_started"
    # its lanes were given back: the next turn of the session runs
    result = await daemon.run_turn(ctx, "hi", kind="channel", turn_id="t-2")
    assert result.ok and result.text == "never said"


async def test_stop_turn_stops_the_turn_running_in_a_session(make_daemon: DaemonMaker) -> None:
    daemon = await make_daemon(["unused"])
    assert daemon.stop_turn("s-idle") is False  # nothing runs there
    started = asyncio.Event()

    class Slow(ScriptedProvider):
        async def complete(self, request):  # type: ignore[no-untyped-def]
            started.set()
            await asyncio.Event().wait()  # until stopped

    ctx = SessionContext(mode="DAEMON", workspace=daemon.workspace, session_id="s-slow",
                         provider=Slow())
    turn = asyncio.create_task(daemon.run_turn(ctx, "long job", kind="channel"))
    await asyncio.wait_for(started.wait(), 10)
    assert daemon.stop_turn("s-other") is False
    assert daemon.stop_turn("s-slow") is True
    result = await asyncio.wait_for(turn, 10)
    assert result.termination == TerminationReason.CANCELLED
