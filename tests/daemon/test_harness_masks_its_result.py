"""The harness hands no credential back to its host: a turn's answer, the detail of a turn
that failed, and an answer recovered from the checkpoint chain are masked where the harness
hands them over (``geode.loop.agent_loop``, ``Runtime.turn_outcome``), for every host: the
terminal, the MCP server and the chat layer, which delivers the answer as it gets it."""

from __future__ import annotations

from geode.daemon.session import SessionContext
from geode.errors import ModelError
from geode.loop import TerminationReason
from geode.loop.events import LoopEvent, TurnFinished
from tests.daemon.conftest import DaemonMaker
from tests.loop.test_loop import make_loop

KEY = "sk-ant-api03-REPEATEDbyTheModel0123456789abcdefXYZ"
TOKEN = "xoxb-1234567890-0987654321-DETAILsecretABCDEFghij"


async def test_the_answer_and_the_recovered_answer_are_masked(make_daemon: DaemonMaker) -> None:
    daemon = await make_daemon([f"the key you asked for is {KEY}"])
    ctx = SessionContext(mode="DAEMON", workspace=daemon.workspace, session_id="s-key")
    result = await daemon.run_turn(ctx, "what is the key?", kind="channel", turn_id="t-1")
    assert result.ok
    for said in (result.text, result.answer):
        assert KEY not in said and "[REDACTED]" in said, said
    outcome = await daemon.turn_outcome("s-key", "t-1")  # what a restart would deliver
    assert outcome.state == "finished"
    assert KEY not in outcome.reply and "[REDACTED]" in outcome.reply, outcome.reply


async def test_a_failed_turn_s_detail_is_masked() -> None:
    error = ModelError(f"upstream said: bad request for token {TOKEN}", kind="bad_request",
                       status_code=400)
    seen: list[LoopEvent] = []

    async def sink(event: LoopEvent) -> None:
        seen.append(event)

    result = await make_loop([error], on_event=sink).run("hi")
    assert result.termination == TerminationReason.MODEL_ERROR
    for said in (result.detail, result.text):  # the text is the loop's note quoting it
        assert TOKEN not in said and "[REDACTED]" in said, said
    finished = [e for e in seen if isinstance(e, TurnFinished)]
    assert finished and TOKEN not in finished[0].detail
