"""What crosses the seam between the harness and the chat turn is data: the termination
and the model's answer are separate fields (never parsed out of, or built as, a "[turn
ended" note), and the lanes are the executor's business (never the chat layer's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bots.turn import friendly_failure
from geode.daemon.port import TurnOutcome
from geode.loop import TurnResult
from geode.loop.termination import TerminationReason

BOTS = Path(__file__).resolve().parents[2] / "bots"


def _result(reason: TerminationReason, *, answer: str = "", detail: str = "") -> TurnResult:
    text = answer or f"[turn ended: {reason.value.replace('_', ' ')}] {detail}".strip()
    return TurnResult(session_id="s", turn_id="t", termination=reason, text=text, rounds=1,
                      detail=detail, text_is_note=not answer, answer=answer)


def test_a_stopped_turn_shows_its_partial_answer_and_never_the_note() -> None:
    assert friendly_failure(_result(TerminationReason.CANCELLED)) == "⏹ Stopped."
    partial = _result(TerminationReason.CANCELLED, answer="half of it")
    assert friendly_failure(partial) == "⏹ Stopped.\n\nhalf of it"


def test_an_answer_that_quotes_the_note_is_shown_whole() -> None:
    # the old text parsing dropped a model answer that happened to hold "[turn ended"
    quoting = "[turn ended: see the log] is what the tool printed"
    assert friendly_failure(_result(TerminationReason.CANCELLED, answer=quoting)) == (
        f"⏹ Stopped.\n\n{quoting}")
    failed = _result(TerminationReason.MAX_ROUNDS, answer=quoting, detail="12 rounds")
    assert friendly_failure(failed) == (
        f"⚠️ I could not finish (max rounds: 12 rounds).\n\n{quoting}")


def test_a_failed_turn_without_an_answer_says_why_once() -> None:
    failed = _result(TerminationReason.MAX_ROUNDS, detail="12 rounds")
    assert failed.text.startswith("[turn ended")  # the CLI's note, unchanged
    assert friendly_failure(failed) == "⚠️ I could not finish (max rounds: 12 rounds)."


def test_a_recovered_outcome_carries_its_reply() -> None:
    assert TurnOutcome(state="finished", termination="natural", text="hi").reply == "hi"
    assert TurnOutcome(state="finished", termination="max_rounds").reply == (
        "[turn ended: max_rounds]")


def test_the_chat_layer_neither_parses_the_note_nor_touches_the_lanes() -> None:
    for path in BOTS.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        assert "[turn ended" not in source, path
        assert "geode.daemon.lanes" not in source, path
        assert "slots_released" not in source, path
        # connectors and the layer get the records' database and the publisher, never the
        # daemon's runtime (its store, observers, settings, sessions)
        assert ".runtime" not in source, path


def test_the_turn_host_offers_no_runtime() -> None:
    from bots.port import TurnHost

    assert "runtime" not in dir(TurnHost)
    assert {"database", "publish", "channel_capacity"} <= set(dir(TurnHost))


async def test_the_fence_is_a_neutral_claim_checked_in_the_write(tmp_path: Path) -> None:
    from bots.events import InboundEvent
    from bots.store.inbound import InboundLog
    from bots.store.leases import ThreadClaim, ThreadLeaseLost, ThreadLeases
    from geode.daemon.port import Claim
    from geode.store import open_store

    store = await open_store(f"sqlite:///{tmp_path / 'geode.db'}")
    try:
        a = ThreadLeases(store=store, owner="a", ttl_s=30)
        b = ThreadLeases(store=store, owner="b", ttl_s=30)
        log = InboundLog(store=store)
        await log.record([(InboundEvent(
            platform="telegram", workspace="w", channel="-100", thread_root="1",
            message_id="1.1", sender="7", dedupe_key="telegram:w:-100:1.1", text="hi"),
            "received")])
        assert len(await log.claim_batch("telegram", "w", owner="a", leases=a)) == 1
        mine, theirs = (ThreadClaim(leases=owner, platform="telegram", workspace="w",
                                    thread=("-100", "1")) for owner in (a, b))
        # a value the layer hands on: it neither is nor takes a database connection
        assert isinstance(mine, Claim) and not callable(mine)
        await store.run_write(mine.check)  # a holds the thread: the write may go on
        with pytest.raises(ThreadLeaseLost):
            await store.run_write(theirs.check)
    finally:
        await store.aclose()
