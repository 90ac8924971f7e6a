"""A streamed draft never shows a secret, not even its first characters: the draft is masked
as the final answer is, and of the text still being written it shows whole words only (a
key in the making matches no shape yet). The attacker's case: a model (or a file it read)
streams a key into the thread, a few characters per delta."""

from __future__ import annotations

from typing import Any

from bots.turn.stream import AnswerDraft
from geode.loop.events import TextDelta
from geode.secret_redaction import MASK, register_secret
from tests.bots.conftest import CHAT, settled
from tests.bots.test_streaming import _Streaming

SHAPED = "sk-ant-api03-PASTEDbyTheUser0123456789abcdefXYZ"
#: a literal registered secret matches no shape: only its whole value is masked
LITERAL = "geode-literal-Zq81vX4mWw2LkR7p"
register_secret(LITERAL)
ANSWER = (f"The key in the file is {SHAPED} and the other is {LITERAL}\n"
          "and that is all there is to say about it here.")


def _leaks(text: str) -> list[str]:
    """Any 6 characters of either secret beyond their public prefix."""
    return [s[i:i + 6] for s in (SHAPED, LITERAL) for i in range(4, len(s) - 5)
            if s[i:i + 6] in text]


def test_no_prefix_of_the_draft_shows_a_secret_s_characters() -> None:
    draft = AnswerDraft()
    for ch in ANSWER:
        draft.follow(TextDelta(text=ch))
        assert not _leaks(draft.markdown()), draft.markdown()
        assert not _leaks(draft.streamable()), draft.streamable()
    draft.responded()
    assert draft.markdown().count(MASK) == 2 and not _leaks(draft.markdown())
    assert draft.markdown().endswith("about it here.")


def test_the_draft_holds_back_only_a_word_that_may_begin_a_secret() -> None:
    draft = AnswerDraft()
    draft.follow(TextDelta(text="Hello wor"))
    assert draft.markdown() == "Hello wor"  # an ordinary word shows as it is written
    draft.follow(TextDelta(text="ld, the key is sk-an"))
    assert draft.markdown() == "Hello world, the key is"
    draft.follow(TextDelta(text="t-api03-abcdefgh"))  # still being written: held back
    assert draft.markdown() == "Hello world, the key is"
    draft.follow(TextDelta(text=" and " + LITERAL[:5]))  # ended: masked; a registered
    # secret's start is held back
    assert draft.markdown() == f"Hello world, the key is {MASK} and"
    draft.responded()  # the call answered: its last word is whole
    assert draft.markdown() == f"Hello world, the key is {MASK} and {LITERAL[:5]}"


async def test_a_streamed_key_never_reaches_the_thread(make_stack: Any, fake: Any) -> None:
    stack = make_stack(provider=_Streaming(ANSWER, piece=3, every_s=0.01), options={
        "stream": True, "progress_after_ms": 0, "progress_edit_interval_s": 0.05})
    await stack.start()
    fake.user_says(CHAT, "@geode_bot explain", from_user=42)
    await fake.wait_until(lambda: any("about it here" in m.plain_text
                                      and not m.plain_text.startswith("⏳")
                                      for m in fake.sent), within=15)
    await settled(stack)
    edits = [m.plain_text for m in fake.sent if m.plain_text.startswith("⏳")]
    assert edits, "the answer was not streamed"
    shown = [str(c.params.get("text", "")) for c in fake.calls]
    assert not [s for s in shown if _leaks(s)]
