"""Resume in place through the session factory: a crash while an effect runs, then opening
the session again (twice, as after two crashes) reports the unknown outcome to the model
once, keeps the turn's guard counters in the chain, and the turn continues in place."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.loop import TerminationReason
from geode.loop.resume import UNCERTAIN_TEXT
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings
from geode.tools.base import ToolContext, tool

STARTED = asyncio.Event()


@tool(safety="write")
async def launch(ctx: ToolContext, target: str) -> str:
    """Launch something that cannot be undone."""
    STARTED.set()
    await asyncio.Event().wait()  # the process "dies" here: frozen, then abandoned
    return "never"


async def test_an_uncertain_effect_is_reported_once_and_the_turn_resumes_in_place(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    settings, secrets = load_settings(env={"GEODE_HOME": str(home)})
    # the first process: frozen while the effect runs, as kill -9 leaves the store
    dead = await Runtime.create(settings=settings, secrets=secrets)
    rt = await Runtime.create(settings=settings, secrets=secrets)
    running: asyncio.Task[object] | None = None
    try:
        def ctx(provider: ScriptedProvider, session_id: str | None = None) -> SessionContext:
            return SessionContext(mode="HEADLESS", workspace=tmp_path, session_id=session_id,
                                  provider=provider, allow_tools=["launch"],
                                  extra_tools=[launch])

        first = await dead.open_session(ctx(ScriptedProvider(
            [ToolCall("list_dir", {"path": "."}), ToolCall("launch", {"target": "x"})])))
        running = asyncio.create_task(first.run("launch it", turn_id="t-1"))
        await asyncio.wait_for(STARTED.wait(), 10)
        sid = first.session_id
        assert rt.store is not None

        # the restart closes the open batch: the effect's outcome is unknown
        model = ScriptedProvider(["checked: it launched"])
        second = await rt.open_session(ctx(model, sid))
        assert len(second.uncertain_calls) == 1
        restored = await rt.store.checkpointer(sid).load()
        assert restored is not None
        # saved with the turn's counters, not reset: a crash now still resumes round 2
        assert restored.state["turn_id"] == "t-1" and restored.state["round"] == 1

        # that process dies too before doing anything; the next one reports nothing again
        third = await rt.open_session(ctx(model, sid))
        assert third.uncertain_calls == [] and third.can_resume("t-1")
        result = await third.resume("t-1")
        assert result.termination == TerminationReason.NATURAL
        assert result.text == "checked: it launched"
        assert result.rounds == 3  # list_dir, launch, the answer: one turn
        sent = json.dumps([m.model_dump() for m in model.calls[0].messages])
        assert sent.count(UNCERTAIN_TEXT[:40]) == 1
        assert sent.count("launch it") == 1  # the user's message, once
        assert not third.can_resume("t-1")  # finished
    finally:
        if running is not None:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        await rt.aclose()
        await dead.aclose()
