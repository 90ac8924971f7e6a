"""File tools confined to the session's workspace: read, write, edit, list, glob, grep.

Every path argument goes through :func:`resolve_in_workspace` inside the handler (the
executor's checks before dispatch do not replace it). Blocking filesystem work runs in a
thread so the event loop keeps serving other sessions.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import stat
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from geode.tools.base import ToolContext, tool
from geode.tools.builtin._workspace import (
    atomic_write,
    display_path,
    path_key,
    resolve_in_workspace,
    truncate,
    workspace_root,
)
from geode.tools.errors import ToolFailure

__all__ = ["edit_file", "glob", "grep", "list_dir", "read_file", "write_file"]

#: the most text one tool result carries; beyond it a ``[... truncated N chars ...]`` marker
OUTPUT_CAP_CHARS = 100_000
#: a single line longer than this is cut (minified files, logs without newlines)
LINE_CAP_CHARS = 4_000
#: bytes sniffed for a NUL to call a file binary
BINARY_SNIFF_BYTES = 8_192
#: files the editor loads whole into memory
EDIT_MAX_BYTES = 10 * 1024 * 1024
#: files larger than this are skipped by grep
GREP_MAX_FILE_BYTES = 5 * 1024 * 1024
#: matches / entries listed at most
GLOB_MAX_RESULTS = 500
LIST_MAX_ENTRIES = 1_000
GREP_MAX_RESULTS = 1_000
#: directories grep does not descend into (version-control internals)
GREP_SKIP_DIRS = frozenset({".git", ".hg", ".svn"})


def _file_key(args: dict[str, Any], ctx: ToolContext) -> list[str]:
    return [path_key("file", ctx, str(args.get("path", "")))]


def _dir_key(args: dict[str, Any], ctx: ToolContext) -> list[str]:
    return [path_key("dir", ctx, str(args.get("path", ".")))]


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head


def _os_failure(exc: OSError, shown: str) -> ToolFailure:
    if isinstance(exc, FileNotFoundError):
        return ToolFailure(f"{shown} does not exist")
    if isinstance(exc, IsADirectoryError):
        return ToolFailure(f"{shown} is a directory; use list_dir")
    if isinstance(exc, NotADirectoryError):
        return ToolFailure(f"{shown}: a part of the path is not a directory")
    if isinstance(exc, PermissionError):
        return ToolFailure(f"{shown}: permission denied")
    return ToolFailure(f"{shown}: {exc.strerror or exc}")


# --------------------------------------------------------------------------- read_file


def _read_line(fh: Any) -> tuple[str, int] | None:
    """One line without its newline, cut at LINE_CAP_CHARS; returns (text, chars dropped)."""
    chunk: bytes = fh.readline(LINE_CAP_CHARS * 4)
    if not chunk:
        return None
    dropped = 0
    if not chunk.endswith(b"\n"):
        # the line goes on: skip the rest without holding it in memory
        while True:
            more: bytes = fh.readline(1 << 16)
            if not more:
                break
            dropped += len(more.decode("utf-8", "replace").rstrip("\n"))
            if more.endswith(b"\n"):
                break
    text = chunk.decode("utf-8", "replace").rstrip("\n").rstrip("\r")
    if len(text) > LINE_CAP_CHARS:
        dropped += len(text) - LINE_CAP_CHARS
        text = text[:LINE_CAP_CHARS]
    return text, dropped


def _read_text(path: Path, shown: str, offset: int, limit: int) -> str:
    try:
        with path.open("rb") as fh:
            if _is_binary(fh.read(BINARY_SNIFF_BYTES)):
                size = os.fstat(fh.fileno()).st_size
                raise ToolFailure(f"{shown} is a binary file ({size} bytes); not shown as text")
            fh.seek(0)
            lines: list[str] = []
            lineno = 0
            while lineno < offset - 1 + limit:
                got = _read_line(fh)
                if got is None:
                    break
                lineno += 1
                if lineno < offset:
                    continue
                text, dropped = got
                if dropped:
                    text += f" [... truncated {dropped} chars ...]"
                lines.append(text)
            more = fh.read(1) != b""
    except OSError as exc:
        raise _os_failure(exc, shown) from exc
    if not lines:
        if lineno == 0:
            return f"({shown} is empty)"
        return f"(offset {offset} is past the end of {shown}, which has {lineno} lines)"
    body = truncate("\n".join(lines), OUTPUT_CAP_CHARS)
    if more:
        body += f"\n[... more lines follow; continue with offset={offset + len(lines)} ...]"
    return body


@tool(safety="read_only", resource_keys=_file_key)
async def read_file(
    ctx: ToolContext,
    path: Annotated[str, Field(description="File path, relative to the workspace")],
    offset: Annotated[int, Field(ge=1, description="First line to return (1-based)")] = 1,
    limit: Annotated[int, Field(ge=1, le=20_000, description="Lines to return at most")] = 2_000,
) -> str:
    """Read a text file of the workspace, optionally a window of lines (offset, limit).

    Long lines and long outputs are cut with a "[... truncated N chars ...]" marker; binary
    files are refused.
    """
    root = workspace_root(ctx)
    target = resolve_in_workspace(root, path)
    return await asyncio.to_thread(_read_text, target, display_path(root, target), offset, limit)


# --------------------------------------------------------------------------- write / edit


def _write(target: Path, shown: str, content: str) -> str:
    if target.is_dir():
        raise ToolFailure(f"{shown} is a directory; give a file path")
    existed = target.exists()
    data = content.encode("utf-8")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, data)
    except OSError as exc:
        raise _os_failure(exc, shown) from exc
    return f"{'overwrote' if existed else 'created'} {shown} ({len(data)} bytes)"


@tool(safety="write", resource_keys=_file_key)
async def write_file(
    ctx: ToolContext,
    path: Annotated[str, Field(description="File path, relative to the workspace")],
    content: Annotated[str, Field(description="The whole new content of the file")],
) -> str:
    """Create or overwrite a file in the workspace with the given content (UTF-8).

    Missing parent directories are created; the write is atomic.
    """
    root = workspace_root(ctx)
    target = resolve_in_workspace(root, path)
    # the parents to be created are checked too: resolve_in_workspace checked the nearest
    # existing ancestor, and mkdir creates real directories only below it.
    return await asyncio.to_thread(_write, target, display_path(root, target), content)


def _edit(target: Path, shown: str, old: str, new: str, replace_all: bool) -> str:
    try:
        st = target.stat()
        if stat.S_ISDIR(st.st_mode):
            raise ToolFailure(f"{shown} is a directory")
        if st.st_size > EDIT_MAX_BYTES:
            raise ToolFailure(f"{shown} is too large to edit ({st.st_size} bytes)")
        raw = target.read_bytes()
    except OSError as exc:
        raise _os_failure(exc, shown) from exc
    if _is_binary(raw[:BINARY_SNIFF_BYTES]):
        raise ToolFailure(f"{shown} is a binary file; refusing to edit it as text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolFailure(f"{shown} is not valid UTF-8; refusing to edit it as text") from exc
    count = text.count(old)
    if count == 0:
        raise ToolFailure(
            f"old_string was not found in {shown}; it must match exactly, whitespace and "
            "line breaks included (read the file first)"
        )
    if count > 1 and not replace_all:
        raise ToolFailure(
            f"old_string occurs {count} times in {shown}; add surrounding context to make it "
            "unique, or set replace_all=true to replace every occurrence"
        )
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    try:
        atomic_write(target, updated.encode("utf-8"))
    except OSError as exc:
        raise _os_failure(exc, shown) from exc
    replaced = count if replace_all else 1
    return f"replaced {replaced} occurrence{'s' if replaced != 1 else ''} in {shown}"


@tool(safety="write", resource_keys=_file_key)
async def edit_file(
    ctx: ToolContext,
    path: Annotated[str, Field(description="File path, relative to the workspace")],
    old_string: Annotated[str, Field(min_length=1, description="Exact text to replace")],
    new_string: Annotated[str, Field(description="Replacement text")],
    replace_all: Annotated[
        bool, Field(description="Replace every occurrence instead of exactly one")
    ] = False,
) -> str:
    """Replace an exact string in a workspace file.

    Fails if old_string is missing, or occurs more than once while replace_all is false.
    """
    if old_string == new_string:
        raise ToolFailure("old_string and new_string are identical; nothing to change")
    if not old_string:
        raise ToolFailure("old_string is empty; give the exact text to replace")
    root = workspace_root(ctx)
    target = resolve_in_workspace(root, path)
    shown = display_path(root, target)
    return await asyncio.to_thread(_edit, target, shown, old_string, new_string, replace_all)


# --------------------------------------------------------------------------- list / glob / grep


def _list(target: Path, shown: str) -> str:
    try:
        with os.scandir(target) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        raise _os_failure(exc, shown) from exc
    lines: list[str] = []
    for entry in entries[:LIST_MAX_ENTRIES]:
        if entry.is_symlink():
            lines.append(f"{entry.name} -> {os.readlink(entry.path)}")
        elif entry.is_dir(follow_symlinks=False):
            lines.append(f"{entry.name}/")
        else:
            lines.append(entry.name)
    if len(entries) > LIST_MAX_ENTRIES:
        lines.append(f"[... {len(entries) - LIST_MAX_ENTRIES} more entries not shown ...]")
    if not lines:
        return f"({shown} is empty)"
    return truncate("\n".join(lines), OUTPUT_CAP_CHARS)


@tool(safety="read_only", resource_keys=_dir_key)
async def list_dir(
    ctx: ToolContext,
    path: Annotated[str, Field(description="Directory, relative to the workspace")] = ".",
) -> str:
    """List a workspace directory: directories end with "/", symlinks show their target."""
    root = workspace_root(ctx)
    target = resolve_in_workspace(root, path)
    return await asyncio.to_thread(_list, target, display_path(root, target))


def _check_pattern(pattern: str) -> None:
    if "\x00" in pattern:
        raise ToolFailure("refused: the pattern contains a NUL byte")
    if not pattern or os.path.isabs(pattern):
        raise ToolFailure(
            f"refused: glob pattern {pattern!r} must be relative to the workspace (e.g. '**/*.py')"
        )
    if ".." in Path(pattern).parts:
        raise ToolFailure(f"refused: glob pattern {pattern!r} climbs out with '..'")


def _glob(root: Path, base: Path, pattern: str) -> str:
    found: list[str] = []
    outside = 0
    seen = 0
    for match in base.glob(pattern):
        real = Path(os.path.realpath(match))
        if not (real == root or root in real.parents):
            # a symlink inside the workspace pointing out of it: not ours to show
            outside += 1
            continue
        seen += 1
        if len(found) < GLOB_MAX_RESULTS:
            found.append(display_path(root, match) + ("/" if match.is_dir() else ""))
    lines = sorted(found)
    if seen > len(found):
        lines.append(f"[... {seen - len(found)} more matches not shown ...]")
    if outside:
        lines.append(f"[{outside} matches leading outside the workspace through symlinks omitted]")
    if not lines:
        return "(no matches)"
    return truncate("\n".join(lines), OUTPUT_CAP_CHARS)


@tool(safety="read_only", resource_keys=_dir_key)
async def glob(
    ctx: ToolContext,
    pattern: Annotated[str, Field(description="Glob pattern, e.g. '**/*.py'")],
    path: Annotated[str, Field(description="Directory to search from")] = ".",
) -> str:
    """Find workspace paths matching a glob pattern (relative to path); results are capped."""
    _check_pattern(pattern)
    root = workspace_root(ctx)
    base = resolve_in_workspace(root, path)
    if not base.is_dir():
        raise ToolFailure(f"{display_path(root, base)} is not a directory")
    return await asyncio.to_thread(_glob, root, base, pattern)


def _grep_files(root: Path, base: Path, name_glob: str | None) -> list[Path]:
    if base.is_file():
        return [base]
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in GREP_SKIP_DIRS)
        for name in sorted(filenames):
            if name_glob and not fnmatch.fnmatch(name, name_glob):
                continue
            candidate = Path(dirpath) / name
            real = Path(os.path.realpath(candidate))
            if (root in real.parents) and real.is_file():
                files.append(candidate)
    return files


def _grep(root: Path, base: Path, regex: re.Pattern[str], name_glob: str | None, cap: int) -> str:
    hits: list[str] = []
    total = 0
    skipped_binary = skipped_large = 0
    for file in _grep_files(root, base, name_glob):
        try:
            if file.stat().st_size > GREP_MAX_FILE_BYTES:
                skipped_large += 1
                continue
            with file.open("rb") as fh:
                if _is_binary(fh.read(BINARY_SNIFF_BYTES)):
                    skipped_binary += 1
                    continue
                fh.seek(0)
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        shown = display_path(root, file)
        for lineno, line in enumerate(text.splitlines(), start=1):
            if regex.search(line):
                total += 1
                if len(hits) < cap:
                    hits.append(f"{shown}:{lineno}:{truncate(line, 500)}")
    lines = hits
    if total > len(hits):
        lines.append(f"[... {total - len(hits)} more matches not shown ...]")
    if skipped_binary or skipped_large:
        lines.append(
            f"[skipped {skipped_binary} binary files and {skipped_large} files over "
            f"{GREP_MAX_FILE_BYTES} bytes]"
        )
    if not hits:
        lines.insert(0, "(no matches)")
    return truncate("\n".join(lines), OUTPUT_CAP_CHARS)


@tool(safety="read_only", resource_keys=_dir_key)
async def grep(
    ctx: ToolContext,
    pattern: Annotated[str, Field(description="Python regular expression")],
    path: Annotated[str, Field(description="File or directory to search")] = ".",
    glob: Annotated[
        str | None, Field(description="Only files whose name matches, e.g. '*.py'")
    ] = None,
    ignore_case: bool = False,
    max_results: Annotated[int, Field(ge=1, le=GREP_MAX_RESULTS)] = 200,
) -> str:
    """Search workspace text files for a regular expression; prints path:line:text.

    Binary files and files over 5 MiB are skipped; results are capped.
    """
    try:
        regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ToolFailure(f"invalid regular expression {pattern!r}: {exc}") from exc
    if glob is not None and ("/" in glob or "\x00" in glob):
        raise ToolFailure("glob filters file names only (e.g. '*.py'); use path for directories")
    root = workspace_root(ctx)
    base = resolve_in_workspace(root, path)
    if not base.exists():
        raise ToolFailure(f"{display_path(root, base)} does not exist")
    return await asyncio.to_thread(_grep, root, base, regex, glob, max_results)
