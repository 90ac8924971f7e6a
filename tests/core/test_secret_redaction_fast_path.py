"""Redaction's fast path masks exactly what the full scan masks.

``geode.secret_redaction`` skips texts shorter than any secret, runs the shape substitutions only
when one alternation of all shapes finds a match, and caches the literal list per set of
registered secrets. An attacker's text built from pieces of every key shape, registered
and given literals, format characters and words must come out exactly as the reference
(every shape and literal matched on the same text, the union of the matches masked, nothing
skipped).
"""

from __future__ import annotations

import re._parser as sre_parse  # the minimum width of each shape
from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

import geode.secret_redaction as redact_mod
from geode.secret_redaction import MASK, redact, redact_text, register_secret

REGISTERED = "zz-registered-secret-9x"
register_secret(REGISTERED)

_PIECES = [
    "sk-ant-", "sk-", "sk-proj-", "sk-or-v1-", "xoxb-", "xoxp-", "xapp-", "123456", "1234",
    ":", "Bearer ", "bearer\t", "BEARER  ", "N", "M", ".", "-", "_", "abcdefghijkl",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345", "0123456789", " ", "/bot", "\u200b", "\u00ad",
    "\U0001f468\u200d\U0001f469", REGISTERED, REGISTERED[:8], "lit-eral-42", "x",
]


def _reference(text: str, extra: Iterable[str]) -> str:
    """The full scan, written out character by character: every character inside any
    shape's match or any literal's occurrence (on the text after the format-character pass)
    is masked, each maximal masked stretch by one MASK; nothing skipped."""
    literals = sorted(
        {*redact_mod.registered_secrets(),
         *(s for s in extra if s and len(s) >= redact_mod._MIN_SECRET_LEN)},
        key=len, reverse=True,
    )
    if redact_mod._FORMAT.search(text):
        text = redact_mod._redact_split(text, literals)
    hidden = [False] * len(text)
    starts = set()
    for pat in redact_mod._PATTERNS:
        for m in pat.finditer(text):
            starts.add(m.start())
            hidden[m.start():m.end()] = [True] * (m.end() - m.start())
    for lit in literals:
        for i in range(len(text)):
            if text.startswith(lit, i):
                starts.add(i)
                hidden[i:i + len(lit)] = [True] * len(lit)
    out = []
    for i, ch in enumerate(text):
        if not hidden[i]:
            out.append(ch)
        elif i == 0 or not hidden[i - 1] or (i in starts and _ended_before(text, i, literals)):
            out.append(MASK)
    return "".join(out)


def _ended_before(text: str, i: int, literals: Iterable[str]) -> bool:
    """A match starts at ``i`` right where another ended (two masks side by side), not
    inside one (one mask for the overlap)."""
    for pat in redact_mod._PATTERNS:
        for m in pat.finditer(text):
            if m.start() < i < m.end():
                return False
    return not any(text.startswith(lit, j) and j < i < j + len(lit)
                   for lit in literals for j in range(i))


def test_no_shape_or_secret_fits_in_a_text_the_fast_path_skips() -> None:
    for pat in redact_mod._PATTERNS:
        low, _ = sre_parse.parse(pat.pattern, pat.flags).getwidth()
        assert low >= redact_mod._MIN_SECRET_LEN, pat.pattern
    register_secret("short")  # below the minimum: never registered, never masked
    assert "short" not in redact_mod.registered_secrets()


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=14))
def test_attacker_texts_are_masked_exactly_like_the_full_scan(pieces: list[str]) -> None:
    text = "".join(pieces)
    extra = ("lit-eral-42", "ab")
    assert redact_text(text, extra) == _reference(text, extra)
    assert redact({"k": [text], "note": text}, extra) == {
        "k": [_reference(text, extra)], "note": _reference(text, extra)}


def test_a_secret_registered_after_a_redaction_is_masked_by_the_next() -> None:
    late = "late-registered-0042"
    assert redact_text(f"a {late} b") == f"a {late} b"  # not a secret yet (and cached)
    register_secret(late)
    assert redact_text(f"a {late} b") == f"a {MASK} b"
    assert redact({"v": [late]}) == {"v": [MASK]}


def test_shapes_next_to_each_other_come_out_like_the_full_scan() -> None:
    token = "123456:ABCdefGHIjklMNOpqrSTUvwxYZ0123456789"
    for text in (f"Bearer {token}", f"xoxb-AAAAAAAA{token}", f"sk-{token}",
                 f"https://api.telegram.org/bot{token}/getMe", f"sk-ant-\u200b{token[:3]}x",
                 f"Bearer\u200b {token}"):
        assert redact_text(text) == _reference(text, ())
    # the case a single alternation of the shapes would get wrong: "Bearer 123456" is a
    # match of its own that ends at the colon, and the token's key would be left
    for text in (f"Bearer {token}", f"https://api.telegram.org/bot{token}/getMe"):
        assert "ABCdefGHIjklMNOpqrSTUvwxYZ" not in redact_text(text)


def test_a_key_is_masked_whole_when_another_shape_or_a_literal_overlaps_it() -> None:
    # One shape after the other let the Slack shape take the Telegram token's digits, and
    # the Telegram shape (which needs them) then missed the key after the colon.
    token = "123456:ABCdefGHIjklMNOpqrSTUvwxYZ0123456789"
    assert "ABCdefGHIjklMNOpqrSTUvwxYZ" not in redact_text(f"xoxb-AAAAAAAA{token}")
    # A literal that begins before a shape's match and ends inside it: all of it is masked.
    key = "sk-ant-" + "q" * 20
    out = redact_text(f"pre lit-eralsk-ant- {key}", ("lit-eralsk-ant-",))
    assert "lit-eral" not in out and "qqqq" not in out
    assert redact_text(f"a {key} b") == f"a {MASK} b"
