"""What redaction scans a text with: the cost of masking at rest (every stored message, event
and log line passes through it) is its regular-expression scans, so none is run that cannot
find anything. Exactness (the same masks as the full scan) is test_secret_redaction_fast_path.py's.

An ASCII text is never scanned for format characters (they are all outside ASCII), and the
shape test searches each shape on its own: ``re`` skips ahead to a shape's literal prefix
only outside an alternation, and the one-alternation test cost ~1.5x the separate searches.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

import geode.secret_redaction as redact_mod
from geode.secret_redaction import MASK, redact, redact_text


class _Spy:
    """A compiled pattern that counts its ``search`` calls."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.inner = pattern
        self.pattern = pattern.pattern
        self.flags = pattern.flags
        self.searched: list[str] = []

    def search(self, text: str, *args: Any) -> re.Match[str] | None:
        self.searched.append(text)
        return self.inner.search(text, *args)

    def finditer(self, text: str, *args: Any) -> Any:
        return self.inner.finditer(text, *args)

    def match(self, text: str, *args: Any) -> re.Match[str] | None:
        return self.inner.match(text, *args)


def test_an_ascii_text_is_not_scanned_for_format_characters(
        monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy(redact_mod._FORMAT)
    monkeypatch.setattr(redact_mod, "_FORMAT", spy)
    key = "sk-ant-" + "q" * 20
    assert redact_text(f"an ordinary line, then {key} and more") == (
        f"an ordinary line, then {MASK} and more")
    assert redact({"role": "user", "text": "plain words only"}) == {
        "role": "user", "text": "plain words only"}
    assert spy.searched == []
    # a text outside ASCII still is, and a key split by a zero-width space is masked whole
    assert redact_text(f"caf\u00e9 sk-ant-\u200b{'q' * 20}") == f"caf\u00e9 {MASK}"
    assert spy.searched


def test_each_shape_is_searched_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    spies = tuple(_Spy(p) for p in redact_mod._patterns())
    monkeypatch.setattr(redact_mod, "_patterns", lambda: spies)
    text = "nothing secret in this sentence, 12345 and M.N."
    assert redact_text(text) == text
    assert all(s.searched == [text] for s in spies)
    key = "sk-ant-" + "q" * 20
    assert redact_text(f"a {key} b") == f"a {MASK} b"


def test_a_key_name_is_searched_once_whatever_the_number_of_records(
        monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy(redact_mod._SECRET_KEY)
    monkeypatch.setattr(redact_mod, "_SECRET_KEY", spy)
    redact_mod._secret_key.cache_clear()
    try:
        records = [{"role": "user", "text": f"line {i}", "api_key": "k" * 12} for i in range(5)]
        assert [redact(r) for r in records] == [
            {"role": "user", "text": f"line {i}", "api_key": MASK} for i in range(5)]
        assert sorted(spy.searched) == ["api_key", "role", "text"]
    finally:
        redact_mod._secret_key.cache_clear()


def test_the_walk_treats_subclasses_and_other_containers_as_before() -> None:
    import enum
    from collections import OrderedDict
    from types import MappingProxyType

    class Kind(enum.StrEnum):
        KEY = "sk-ant-" + "q" * 20

    class Count(enum.IntEnum):
        ONE = 1

    key = "sk-ant-" + "q" * 20
    value = OrderedDict(a=(Kind.KEY, Count.ONE, 1.5, None, True),
                        token=b"raw", nested=MappingProxyType({"b": [key]}), other={1, 2})
    assert redact(value) == {"a": [MASK, Count.ONE, 1.5, None, True], "token": MASK,
                             "nested": {"b": [MASK]}, "other": {1, 2}}
    assert redact_mod.redact_values(value) == {
        "a": [MASK, Count.ONE, 1.5, None, True], "token": b"raw", "nested": {"b": [MASK]},
        "other": {1, 2}}
