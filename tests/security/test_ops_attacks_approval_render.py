"""Issue #30 finding 8, the rendering: nothing a reader cannot see survives in what an
approver reads (white space runs, control and invisible format characters), while ordinary
code keeps its shape."""

from __future__ import annotations

import pytest

from geode.executor.summary import describe_call, full_call, show_invisible


@pytest.mark.parametrize(("raw", "shown"), [
    (" " * 3000, "␠×3000"),
    ("\n" * 200, "⏎×200\n"),
    ("\t" * 9, "⇥×9"),
    (" \n" * 100, "␠⏎" * 100 + "\n"),
    ("a\u200bb", "a⟨U+200B⟩b"),
    ("rm -rf /\u202e/emoh", "rm -rf /⟨U+202E⟩/emoh"),
    ("x\x1b[2Ky", "x⟨U+001B⟩[2Ky"),
    ("x\r\ry", "x␍×2y"),
    ("a\u00a0\u00a0b", "a⟨U+00A0⟩×2b"),
])
def test_invisible_runs_are_marked(raw: str, shown: str) -> None:
    assert show_invisible(raw) == shown


def test_ordinary_code_keeps_its_shape() -> None:
    code = "def f(x):\n    if x:\n        return 1\n\n\n    return 2\n"
    assert show_invisible(code) == code


@pytest.mark.parametrize("tool", ["run_bash", "docs__publish", "write_file"])
def test_no_tail_hides_behind_white_space(tool: str) -> None:
    payload = "echo ok" + " " * 3000 + "\n" * 200 + "\u200b" * 50 + "; touch /tmp/pwned"
    args = {"command": payload} if tool == "run_bash" else (
        {"path": "a.sh", "content": payload} if tool == "write_file" else {"text": payload})
    shown = describe_call(tool, args, None)
    assert "touch /tmp/pwned" in shown and "more chars" not in shown, shown
    assert len(shown) < 600
    assert "touch /tmp/pwned" in full_call(tool, args, None)
