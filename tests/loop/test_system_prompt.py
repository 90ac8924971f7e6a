"""The system prompt's sources: declared GEODE.md sections only, re-read when the file changes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pytest import MonkeyPatch

from geode.loop.system_prompt import (
    BASE,
    SystemPromptSources,
    build_system_prompt,
    read_sections,
)


def _write(path: Path, text: str, *, mtime_ns: int | None = None) -> None:
    path.write_text(text, encoding="utf-8")
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


def test_only_declared_sections_are_used(tmp_path: Path) -> None:
    _write(tmp_path / "GEODE.md", "# Title\nignored\n## Rules\nno force pushes\n"
                                  "## Secrets\ntoken=abc\n## Project\nGEODE itself\n")
    assert read_sections(tmp_path / "GEODE.md") == {"Rules": "no force pushes",
                                                    "Project": "GEODE itself"}


def test_prompt_order_operator_project_rules(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    _write(home / "GEODE.md", "## Identity\nthe operator's bot\n")
    _write(ws / "GEODE.md", "## Conventions\ntabs\n")
    text = build_system_prompt(SystemPromptSources(home=home, workspace=ws,
                                                   rules=["binding rule"], mode="DAEMON"))
    assert text.startswith(BASE)
    assert "Session mode: DAEMON." in text
    operator = text.index('<operator section="Identity">')
    project = text.index('<project section="Conventions">')
    assert operator < project < text.index("binding rule")


def test_an_edited_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "GEODE.md"
    _write(path, "## Rules\nfirst\n", mtime_ns=1_000_000_000)
    assert read_sections(path) == {"Rules": "first"}
    # Same size and the same mtime as before would be a cache hit: change the mtime only.
    _write(path, "## Rules\nother\n", mtime_ns=2_000_000_000)
    assert read_sections(path) == {"Rules": "other"}
    # Same mtime, different size.
    _write(path, "## Rules\nlonger text\n", mtime_ns=2_000_000_000)
    assert read_sections(path) == {"Rules": "longer text"}


def test_a_removed_file_contributes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "GEODE.md"
    _write(path, "## Rules\nbe brief\n")
    assert read_sections(path) == {"Rules": "be brief"}
    path.unlink()
    assert read_sections(path) == {}
    assert read_sections(tmp_path / "missing" / "GEODE.md") == {}


def test_a_caller_cannot_change_the_cached_sections(tmp_path: Path) -> None:
    path = tmp_path / "GEODE.md"
    _write(path, "## Rules\nkeep\n")
    read_sections(path)["Rules"] = "changed"
    assert read_sections(path) == {"Rules": "keep"}


def test_undecodable_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "GEODE.md"
    path.write_bytes(b"## Rules\n\xff\xfe\n")
    assert read_sections(path) == {}


def test_an_unchanged_file_is_not_read_again(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    path = tmp_path / "GEODE.md"
    _write(path, "## Rules\nonce\n")
    reads: list[Path] = []
    real = Path.read_text

    def counting(self: Path, *args: Any, **kwargs: Any) -> str:
        reads.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counting)
    for _ in range(3):
        assert read_sections(path) == {"Rules": "once"}
    assert reads.count(path) <= 1
