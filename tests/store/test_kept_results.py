"""Kept tool results: stored whole, read back only by their own session; the transcript says
when a result was cut and by how much."""

from __future__ import annotations

from geode.messages import KeptResult, Message, ToolResultBlock, ToolUseBlock
from geode.store import Store
from geode.store.transcript import build_transcript, render_transcript


async def test_a_kept_result_is_read_back_only_by_its_session(store: Store) -> None:
    text = "é" * 70_000 + "tail"
    await store.results.keep(result_id="res-1", session_id="s-a", turn_id="t", call_id="c",
                             tool="read", text=text)
    assert await store.results.read(session_id="s-a", result_id="res-1") == text
    assert await store.results.read(session_id="s-b", result_id="res-1") is None
    assert await store.results.read(session_id="s-a", result_id="res-2") is None


def test_the_transcript_says_a_result_was_cut_and_by_how_much() -> None:
    kept = KeptResult(result_id="res-9", total_chars=72_000, shown_chars=16_000)
    messages = [
        Message.user("read"),
        Message(role="assistant", content=[ToolUseBlock(id="u1", name="read", input={})]),
        Message(role="user", content=[ToolResultBlock.text("u1", "head ... tail")
                                      .model_copy(update={"kept": kept})]),
    ]
    (_, entry) = build_transcript(messages)
    assert entry.tool_calls[0].cut == {"result_id": "res-9", "total_chars": 72_000,
                                       "shown_chars": 16_000}
    lines = render_transcript([entry])
    assert "cut: 16000 of 72000 characters shown, the rest kept as res-9" in lines[0]


async def test_kept_results_are_pruned_with_the_timeline_retention(store: Store) -> None:
    await store.results.keep(result_id="res-old", session_id="s", turn_id="t", call_id="c",
                             tool="read", text="x")
    assert await store.results.prune(older_than_days=1) == 0
    assert await store.results.prune(older_than_days=-1) == 1  # everything is "older"
    assert await store.results.read(session_id="s", result_id="res-old") is None
