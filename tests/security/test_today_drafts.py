"""The attacker's view of a streamed draft (the progress message's edits, Slack's native
stream that only appends): a model, or a file it read, streams a secret into the thread in
pieces chosen to slip past the mask. No state of the draft may show a secret's characters
before the mask can match it: neither :meth:`AnswerDraft.markdown` (edits) nor
:meth:`AnswerDraft.streamable` (what a stream appends)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from bots.turn.stream import AnswerDraft
from geode.loop.events import ModelResponded, TextDelta, ToolProposed, ToolResulted
from geode.secret_redaction import MASK, may_begin_secret, register_secret

SHAPED = "sk-ant-api03-DRAFTattack0123456789abcdefXYZ"
#: a registered secret of letters only: no shape, no digit, nothing key-like but its value
WORDY = "QzvenLettersOnlyPassphraseKw"
register_secret(WORDY)
ZW = "\u200b"


def _states(pieces: Iterable[str], *, respond: bool = True) -> list[str]:
    """Every markdown and streamable text the draft shows while ``pieces`` arrive."""
    draft = AnswerDraft()
    seen: list[str] = []
    for piece in pieces:
        draft.follow(TextDelta(text=piece))
        seen += [draft.markdown(), draft.streamable()]
    if respond:
        draft.follow(ModelResponded(turn_id="t", model="m", stop_reason="end_turn"))
        seen += [draft.markdown(), draft.streamable()]
    return seen


def _shows_start_of(secret: str, text: str, public: int = 0) -> bool:
    """Whether ``text`` holds a word starting with the first characters of ``secret``
    beyond its ``public`` prefix (two of them are already a leak of a short secret)."""
    visible = text.replace(ZW, "")
    head = secret[:max(public + 2, 2)]
    return re.search(rf"(?:^|[^A-Za-z0-9]){re.escape(head)}", visible) is not None


def _leaks(secret: str, text: str) -> bool:
    visible = text.replace(ZW, "")
    return any(secret[i:i + 6] in visible for i in range(7, len(secret) - 5))


ANSWER = f"Here: {SHAPED} is the key.\nDone."


def test_a_shaped_key_split_across_deltas_in_every_way_never_shows() -> None:
    n = len(ANSWER)
    first = ANSWER.index(SHAPED)
    for i in range(first - 1, first + len(SHAPED) + 1):
        for j in range(i + 1, n):
            for state in _states([ANSWER[:i], ANSWER[i:j], ANSWER[j:]]):
                assert not _leaks(SHAPED, state), (i, j, state)
    final = _states([ANSWER])[-2]
    assert MASK in final and final.endswith("Done.")


def test_a_key_inside_a_code_fence_never_shows() -> None:
    text = f"Run this:\n\n```bash\nexport ANTHROPIC_API_KEY={SHAPED}\ncurl -s x\n```\nok"
    for state in _states(text[i:i + 3] for i in range(0, len(text), 3)):
        assert not _leaks(SHAPED, state), state
    final = _states([text])[-2]
    assert MASK in final and "```bash" in final


def test_a_key_with_invisible_characters_inside_never_shows() -> None:
    hidden = ZW.join(SHAPED[k:k + 5] for k in range(0, len(SHAPED), 5))
    text = f"the key {hidden} there"
    for state in _states(text):
        assert not _leaks(SHAPED, state), state
    assert MASK in _states([text])[-2]


def test_a_registered_secret_one_character_per_delta_shows_not_even_its_first() -> None:
    text = f"your password is {WORDY} ok"
    for state in _states(text):
        assert not _shows_start_of(WORDY, state), state
    final = _states([text])[-2]
    assert final == f"your password is {MASK} ok"


def test_a_registered_secret_after_punctuation_shows_not_even_its_first() -> None:
    text = f"(password: ({WORDY}) ok"
    for state in _states(text):
        assert not _shows_start_of(WORDY, state), state


def test_a_registered_secret_with_invisible_characters_inside_never_shows() -> None:
    hidden = ZW.join(WORDY)
    text = f"it is {hidden} ok"
    for state in _states(text):
        assert not _shows_start_of(WORDY, state), state
    assert _states([text])[-2].count(MASK) == 1


def test_invisible_characters_do_not_hide_a_key_s_start_from_the_hold() -> None:
    assert may_begin_secret(ZW.join(WORDY[:3]))
    assert may_begin_secret(WORDY[:1]) and may_begin_secret("(" + WORDY[:2])
    # an ordinary word is not held back
    assert not may_begin_secret("Hello") and not may_begin_secret("the")


def test_a_secret_across_a_tool_line_is_masked_in_each_part() -> None:
    """The draft masks each text block on its own: a key written in one model call, then a
    tool runs, then the rest, is no key in either block and shows as written (as the
    final answer, which is the last call's text, would)."""
    draft = AnswerDraft()
    draft.follow(TextDelta(text=f"first {SHAPED}"))
    draft.follow(ToolProposed(id="c1", name="read_file"))
    draft.follow(ToolResulted(id="c1", name="read_file", status="ok"))
    draft.follow(TextDelta(text=f"again {SHAPED} end"))
    assert not _leaks(SHAPED, draft.markdown()) and not _leaks(SHAPED, draft.streamable())
    assert draft.markdown().count(MASK) == 2


def test_a_bearer_token_of_letters_never_shows_its_first_characters() -> None:
    token = "abcdefghijkLMNOPQRSTuvwxyz0123456789"
    text = f"header: Authorization: Bearer {token} ok"
    for state in _states(text):
        assert "abcdefgh" not in state, state


SPACED = "Qcorrect Qhorse Qbattery Qstaple"
register_secret(SPACED)  # a passphrase from .env (a *PASSWORD* variable): spaces inside


def test_a_registered_passphrase_with_spaces_never_shows_its_words() -> None:
    text = f"it is {SPACED} ok"
    for state in _states(text):
        assert "Qhorse" not in state, state
