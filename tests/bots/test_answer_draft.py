"""The draft as an append-only stream shows it (``AnswerDraft.streamable``) and the code
fence a page cut falls inside (``bots.turn.markup``): pure functions, no platform."""

from __future__ import annotations

import itertools

from bots.turn.markup import closed_markdown, fence_opening, open_fence
from bots.turn.stream import AnswerDraft
from geode.loop.events import (
    ModelResponded,
    ModelRetrying,
    TextDelta,
    ToolProposed,
    ToolResulted,
    VerifyFailed,
)

_RESPONDED = ModelResponded(turn_id="t", model="m", stop_reason="tool_use", input_tokens=1,
                            output_tokens=1)


def _follow(draft: AnswerDraft, *events: object) -> list[str]:
    """The streamable text after each event."""
    shown = []
    for event in events:
        draft.follow(event)  # type: ignore[arg-type]
        shown.append(draft.streamable())
    return shown


def test_tool_lines_stream_between_text_blocks_once_their_outcome_is_known() -> None:
    draft = AnswerDraft()
    shown = _follow(
        draft,
        TextDelta(text="Looking.\n"),
        ToolProposed(id="1", name="read_file"),
        ToolProposed(id="2", name="grep"),
        ToolResulted(id="2", name="grep", status="error"),  # out of order: waits for the first
        ToolResulted(id="1", name="read_file", status="ok"),
        _RESPONDED,
        TextDelta(text="Found it."),
    )
    assert shown == [
        "Looking.",
        "Looking.",
        "Looking.",
        "Looking.",
        "Looking.\n\n`🔧 read_file ✓`\n\n`🔧 grep ✗`",
        "Looking.\n\n`🔧 read_file ✓`\n\n`🔧 grep ✗`",
        "Looking.\n\n`🔧 read_file ✓`\n\n`🔧 grep ✗`\n\nFound it.",
    ]
    # every state extends the one before: a stream only appends
    assert all(b.startswith(a) for a, b in itertools.pairwise(shown))
    # the paced draft shows the same lines, the running one too
    assert draft.markdown() == shown[-1]


def test_a_tool_the_model_wrote_past_streams_as_proposed() -> None:
    draft = AnswerDraft()
    _follow(draft, TextDelta(text="A"), ToolProposed(id="1", name="web_fetch"), _RESPONDED,
            TextDelta(text="B"))
    assert draft.streamable() == "A\n\n`🔧 web_fetch`\n\nB"


def test_a_refused_or_retried_draft_is_no_extension() -> None:
    draft = AnswerDraft()
    shown = _follow(draft, TextDelta(text="Intro."), _RESPONDED,
                    TextDelta(text="the wrong answer"), _RESPONDED,
                    VerifyFailed(turn_id="t", reason="no", attempt=1))
    assert shown[-2] == "Intro.\n\nthe wrong answer" and shown[-1] == "Intro."
    draft = AnswerDraft()
    shown = _follow(draft, TextDelta(text="partial"),
                    ModelRetrying(error="x", delay_s=0.1, attempt=1, max_attempts=3))
    assert shown == ["partial", ""]


def test_the_fence_a_cut_falls_inside_is_named_with_its_language() -> None:
    text = "Intro\n\n```python\nx = 1\n"
    assert open_fence(text) == "```" and fence_opening(text) == "```python"
    assert fence_opening(text + "```\n\nafter") is None
    assert fence_opening("~~~~ sh\nls\n```\n") == "~~~~ sh"  # a shorter other fence is code
    assert closed_markdown(text) == text + "```"
