"""File tools: workspace confinement, edit semantics, caps."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from geode.tools.base import ToolContext, ToolDef
from geode.tools.builtin import (
    BUILTIN_TOOLS,
    builtin_tools,
    edit_file,
    glob,
    grep,
    list_dir,
    read_file,
    resolve_in_workspace,
    write_file,
)
from geode.tools.builtin import files as files_mod
from geode.tools.errors import ToolFailure, WorkspaceEscapeError

ESCAPES = {
    "dotdot": "../outside/secret.txt",
    "dotdot_nested": "sub/../../outside/secret.txt",
    "absolute": "/etc/passwd",
    "file_symlink": "link_out",
    "dir_symlink": "dir_out/secret.txt",
    "dangling_symlink": "dangling",
    "nul": "hello.txt\x00.png",
}


def _args_for(tool: ToolDef, path: str) -> dict[str, Any]:
    if tool is write_file:
        return {"path": path, "content": "pwned"}
    if tool is edit_file:
        return {"path": path, "old_string": "SECRET", "new_string": "pwned"}
    if tool is glob:
        return {"pattern": "*", "path": path}
    if tool is grep:
        return {"pattern": "SECRET", "path": path}
    return {"path": path}


def _snapshot(tree: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("tool", [read_file, write_file, edit_file, list_dir, glob, grep])
@pytest.mark.parametrize("escape", list(ESCAPES), ids=list(ESCAPES))
async def test_escape_attempts_are_refused(
    call: Any, tool: ToolDef, escape: str, ctx: ToolContext, outside: Path
) -> None:
    before = _snapshot(outside)
    path = ESCAPES[escape]
    if tool in (list_dir, glob) and escape in ("dir_symlink",):
        path = "dir_out"  # the directory itself, through the symlink
    with pytest.raises(WorkspaceEscapeError, match="refused"):
        await call(tool, ctx, **_args_for(tool, path))
    assert _snapshot(outside) == before  # nothing written, nothing created outside
    assert not (outside / "new.txt").exists()


def test_refusal_messages_name_the_reason(workspace: Path) -> None:
    with pytest.raises(WorkspaceEscapeError, match="NUL byte"):
        resolve_in_workspace(workspace, "a\x00b")
    with pytest.raises(WorkspaceEscapeError, match=r"absolute path '/etc/passwd' is outside"):
        resolve_in_workspace(workspace, "/etc/passwd")
    with pytest.raises(WorkspaceEscapeError, match=r"climbs out of the workspace"):
        resolve_in_workspace(workspace, "../x")
    with pytest.raises(WorkspaceEscapeError, match=r"resolves through a symlink to .*secret.txt"):
        resolve_in_workspace(workspace, "link_out")


def test_paths_inside_resolve(workspace: Path) -> None:
    real = Path(os.path.realpath(workspace))
    assert resolve_in_workspace(workspace, "hello.txt") == real / "hello.txt"
    assert resolve_in_workspace(workspace, str(workspace / "sub/code.py")) == real / "sub/code.py"
    assert resolve_in_workspace(workspace, "sub/../hello.txt") == real / "hello.txt"
    assert resolve_in_workspace(workspace, "link_in") == real / "hello.txt"
    assert resolve_in_workspace(workspace, "new/deeper/file.txt") == real / "new/deeper/file.txt"
    assert resolve_in_workspace(workspace, ".") == real


def test_workspace_given_through_a_symlink(tmp_path: Path, workspace: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(workspace)
    assert resolve_in_workspace(alias, str(alias / "hello.txt")) == workspace / "hello.txt"
    with pytest.raises(WorkspaceEscapeError):
        resolve_in_workspace(alias, "link_out")


def test_created_parent_that_is_a_symlink_out_is_refused(workspace: Path, outside: Path) -> None:
    # the nearest existing ancestor of the new path is dir_out -> outside
    with pytest.raises(WorkspaceEscapeError):
        resolve_in_workspace(workspace, "dir_out/newdir/new.txt")


async def test_glob_pattern_escapes_refused(call: Any, ctx: ToolContext) -> None:
    for pattern in ("../*", "/etc/*", "sub/../../outside/*"):
        with pytest.raises(ToolFailure, match="refused"):
            await call(glob, ctx, pattern=pattern)


async def test_glob_and_grep_do_not_follow_symlinks_out(call: Any, ctx: ToolContext) -> None:
    everything = await call(glob, ctx, pattern="**/*")
    assert isinstance(everything, str)
    assert "secret.txt" not in everything
    assert "sub/code.py" in everything
    through_link = await call(glob, ctx, pattern="dir_out/*")
    assert through_link == "[1 matches leading outside the workspace through symlinks omitted]"
    found = await call(grep, ctx, pattern="SECRET")
    assert isinstance(found, str)
    assert "outside the workspace" not in found  # the secret's text never shows
    assert found.splitlines() == ["sub/code.py:2:    return 1  # SECRET-looking but inside"]


async def test_resource_keys_use_resolved_paths(
    call: Any, ctx: ToolContext, workspace: Path
) -> None:
    real = os.path.realpath(workspace)
    assert read_file.keys_for({"path": "sub/../hello.txt"}, ctx) == [f"file:{real}/hello.txt"]
    assert write_file.keys_for({"path": "link_in", "content": ""}, ctx) == [
        f"file:{real}/hello.txt"
    ]
    assert list_dir.keys_for({"path": "sub"}, ctx) == [f"dir:{real}/sub"]
    assert grep.keys_for({"pattern": "x"}, ctx) == [f"dir:{real}"]
    # a refused path still gets a key (the handler refuses it), and never raises here
    assert read_file.keys_for({"path": "../x"}, ctx)[0].startswith("file:")
    assert [t.safety for t in (read_file, list_dir, glob, grep)] == ["read_only"] * 4
    assert [t.safety for t in (write_file, edit_file)] == ["write", "write"]


def test_builtin_tool_set() -> None:
    names = [t.name for t in builtin_tools()]
    assert names == [t.name for t in BUILTIN_TOOLS]
    assert set(names) == {
        "read_file", "write_file", "edit_file", "list_dir", "glob", "grep",
        "run_bash", "web_fetch", "computer", "read_result",
    }  # fmt: skip


# ----------------------------------------------------------------------------- read


async def test_read_file_window_and_continuation(
    call: Any, ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "lines.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = await call(read_file, ctx, path="lines.txt", offset=3, limit=2)
    assert out == "line 3\nline 4\n[... more lines follow; continue with offset=5 ...]"
    assert await call(read_file, ctx, path="lines.txt", offset=9) == "line 9\nline 10"
    past = await call(read_file, ctx, path="lines.txt", offset=50)
    assert past == "(offset 50 is past the end of lines.txt, which has 10 lines)"


async def test_read_file_refuses_binary_and_dirs(
    call: Any, ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "blob.bin").write_bytes(b"\x89PNG\x00\x00\x01rest")
    with pytest.raises(ToolFailure, match="binary file"):
        await call(read_file, ctx, path="blob.bin")
    with pytest.raises(ToolFailure, match="is a directory"):
        await call(read_file, ctx, path="sub")
    with pytest.raises(ToolFailure, match="does not exist"):
        await call(read_file, ctx, path="missing.txt")


async def test_read_file_truncation_markers(
    call: Any, ctx: ToolContext, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (workspace / "long_line.txt").write_text("x" * (files_mod.LINE_CAP_CHARS + 123) + "\nend\n")
    out = await call(read_file, ctx, path="long_line.txt")
    assert out == "x" * files_mod.LINE_CAP_CHARS + " [... truncated 123 chars ...]\nend"

    monkeypatch.setattr(files_mod, "OUTPUT_CAP_CHARS", 50)
    (workspace / "many.txt").write_text("".join(f"{i:09d}\n" for i in range(20)))  # 10 chars each
    out = await call(read_file, ctx, path="many.txt")
    assert isinstance(out, str)
    body = "\n".join(f"{i:09d}" for i in range(20))
    assert out == body[:50] + f"\n[... truncated {len(body) - 50} chars ...]"


# ----------------------------------------------------------------------------- write / edit


async def test_write_file_creates_parents_atomically(
    call: Any, ctx: ToolContext, workspace: Path
) -> None:
    out = await call(write_file, ctx, path="a/b/c.txt", content="héllo\n")
    assert out == "created a/b/c.txt (7 bytes)"
    assert (workspace / "a/b/c.txt").read_text() == "héllo\n"
    (workspace / "hello.txt").chmod(0o640)
    out = await call(write_file, ctx, path="hello.txt", content="new")
    assert out == "overwrote hello.txt (3 bytes)"
    assert (workspace / "hello.txt").read_text() == "new"
    assert stat.S_IMODE((workspace / "hello.txt").stat().st_mode) == 0o640
    leftovers = [p.name for p in workspace.rglob("*geode-tmp*")]
    assert leftovers == []


async def test_write_through_inside_symlink_replaces_target(
    call: Any, ctx: ToolContext, workspace: Path
) -> None:
    await call(write_file, ctx, path="link_in", content="via link")
    assert (workspace / "hello.txt").read_text() == "via link"


async def test_edit_file_exact_single_replace(call: Any, ctx: ToolContext, workspace: Path) -> None:
    (workspace / "e.txt").write_text("alpha beta\ngamma beta\n")
    out = await call(edit_file, ctx, path="e.txt", old_string="alpha beta", new_string="ALPHA")
    assert out == "replaced 1 occurrence in e.txt"
    assert (workspace / "e.txt").read_text() == "ALPHA\ngamma beta\n"


async def test_edit_file_not_unique_fails_without_change(
    call: Any, ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "e.txt").write_text("beta beta beta\n")
    with pytest.raises(ToolFailure, match="occurs 3 times"):
        await call(edit_file, ctx, path="e.txt", old_string="beta", new_string="B")
    assert (workspace / "e.txt").read_text() == "beta beta beta\n"
    out = await call(
        edit_file, ctx, path="e.txt", old_string="beta", new_string="B", replace_all=True
    )
    assert out == "replaced 3 occurrences in e.txt"
    assert (workspace / "e.txt").read_text() == "B B B\n"


async def test_edit_file_missing_or_inexact_fails(
    call: Any, ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "e.txt").write_text("def f():\n    return 1\n")
    with pytest.raises(ToolFailure, match="not found"):
        # whitespace differs: exact match only
        await call(edit_file, ctx, path="e.txt", old_string="def f():\n  return 1", new_string="x")
    with pytest.raises(ToolFailure, match="identical"):
        await call(edit_file, ctx, path="e.txt", old_string="return 1", new_string="return 1")
    with pytest.raises(ToolFailure, match="does not exist"):
        await call(edit_file, ctx, path="nope.txt", old_string="a", new_string="b")
    assert (workspace / "e.txt").read_text() == "def f():\n    return 1\n"


# ----------------------------------------------------------------------------- list / glob / grep


async def test_list_dir_shows_kinds(call: Any, ctx: ToolContext, outside: Path) -> None:
    out = await call(list_dir, ctx)
    assert isinstance(out, str)
    lines = out.splitlines()
    assert "sub/" in lines and "hello.txt" in lines
    assert f"link_out -> {outside / 'secret.txt'}" in lines


async def test_glob_caps_results(
    call: Any, ctx: ToolContext, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(7):
        (workspace / f"f{i}.log").write_text("")
    monkeypatch.setattr(files_mod, "GLOB_MAX_RESULTS", 5)
    out = await call(glob, ctx, pattern="*.log")
    assert isinstance(out, str)
    lines = out.splitlines()
    assert len(lines) == 6 and lines[-1] == "[... 2 more matches not shown ...]"


async def test_grep_skips_binaries_and_caps(call: Any, ctx: ToolContext, workspace: Path) -> None:
    (workspace / "b.bin").write_bytes(b"needle\x00needle")
    (workspace / "t.txt").write_text("needle 1\nno\nNEEDLE 2\nneedle 3\n")
    out = await call(grep, ctx, pattern="needle", max_results=1)
    assert out == (
        "t.txt:1:needle 1\n[... 1 more matches not shown ...]\n"
        f"[skipped 1 binary files and 0 files over {files_mod.GREP_MAX_FILE_BYTES} bytes]"
    )
    out = await call(grep, ctx, pattern="needle", ignore_case=True, glob="*.txt")
    assert isinstance(out, str)
    assert out.splitlines() == ["t.txt:1:needle 1", "t.txt:3:NEEDLE 2", "t.txt:4:needle 3"]
    with pytest.raises(ToolFailure, match="invalid regular expression"):
        await call(grep, ctx, pattern="(")
