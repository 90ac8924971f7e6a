"""File tools confined to the session's workspace: read, write, edit, list, glob, grep.

Every path argument is refused early by :func:`resolve_in_workspace` when plainly outside,
then opened through a :class:`WorkspaceWalk` (directory fds, ``O_NOFOLLOW`` per component):
that walk is the boundary, race-free against a concurrent symlink swap. Only regular files
are read. Blocking filesystem work runs in a thread so the event loop keeps serving other
sessions; ``grep`` uses RE2 (linear time) and stops when its call is cancelled.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import re2
from pydantic import Field

from geode.tools.base import ToolContext, tool
from geode.tools.builtin._workspace import (
    Inode,
    WorkspaceWalk,
    atomic_write,
    display_path,
    is_own_name,
    own_inodes,
    path_key,
    protected_paths,
    refuse_own,
    resolve_in_workspace,
    split_user_path,
    truncate,
    workspace_root,
)
from geode.tools.errors import ToolFailure, WorkspaceEscapeError

__all__ = [
    "edit_file",
    "glob",
    "grep",
    "list_dir",
    "read_file",
    "read_workspace_bytes",
    "write_file",
]

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
#: paths glob looks at before it stops (a pattern over a huge tree must end)
GLOB_MAX_VISITED = 100_000
#: regular files only, never through a symlink, never waiting on a FIFO
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
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


def _read_text(walk: WorkspaceWalk, parts: list[str], shown: str, offset: int, limit: int) -> str:
    try:
        with walk:
            name = walk.descend(parts, shown)
            fd = walk.open_file(name, shown)
        with os.fdopen(fd, "rb") as fh:
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
    walk, parts, shown = _prepare(ctx, path)
    return await asyncio.to_thread(_read_text, walk, parts, shown, offset, limit)


def read_workspace_bytes(ctx: ToolContext, user_path: str, *, max_bytes: int
                         ) -> tuple[str, bytes]:
    """A regular file of the workspace, whole: (its path as the model sees it, its bytes).

    Resolved like the file tools (the race-free walk, GEODE's own files refused); for tools
    that hand a file on (``send_file``). Blocking: call through ``asyncio.to_thread``.

    Raises:
        ToolFailure: outside the workspace, missing, not a regular file, or larger than
            ``max_bytes`` (nothing beyond that is read).
    """
    walk, parts, shown = _prepare(ctx, user_path)
    try:
        with walk:
            name = walk.descend(parts, shown)
            fd = walk.open_file(name, shown)
        with os.fdopen(fd, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > max_bytes:
                raise ToolFailure(f"{shown} is {size} bytes, over the {max_bytes} bytes "
                                  "that can be sent")
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise _os_failure(exc, shown) from exc
    if len(data) > max_bytes:  # grew while read
        raise ToolFailure(f"{shown} is over the {max_bytes} bytes that can be sent")
    return shown, data


# --------------------------------------------------------------------------- write / edit


def _prepare(ctx: ToolContext, user_path: str) -> tuple[WorkspaceWalk, list[str], str]:
    """The early, lexical refusal; then the walk that does the real, race-free resolution."""
    root = workspace_root(ctx)
    target = resolve_in_workspace(root, user_path)
    parts = split_user_path(root, user_path)
    own = own_inodes(ctx.deps.protected_paths, root)
    return (
        WorkspaceWalk(root, protected=protected_paths(ctx, root), own=own),
        parts,
        display_path(root, target),
    )


def _write(walk: WorkspaceWalk, parts: list[str], shown: str, content: str) -> str:
    data = content.encode("utf-8")
    try:
        with walk:
            name = walk.descend(parts, shown, create_dirs=True)
            if not name:
                raise ToolFailure(f"{shown} is a directory; give a file path")
            try:
                st = os.stat(name, dir_fd=walk.fd, follow_symlinks=False)
                existed = True
                if stat.S_ISDIR(st.st_mode):
                    raise ToolFailure(f"{shown} is a directory; give a file path")
            except FileNotFoundError:
                existed = False
            atomic_write(walk.fd, name, data)
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
    walk, parts, shown = _prepare(ctx, path)
    return await asyncio.to_thread(_write, walk, parts, shown, content)


def _edit(
    walk: WorkspaceWalk, parts: list[str], shown: str, old: str, new: str, replace_all: bool
) -> str:
    try:
        with walk:
            name = walk.descend(parts, shown)
            if not name:
                raise ToolFailure(f"{shown} is a directory")
            fd = walk.open_file(name, shown)
            with os.fdopen(fd, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size > EDIT_MAX_BYTES:
                    raise ToolFailure(f"{shown} is too large to edit ({size} bytes)")
                raw = fh.read(EDIT_MAX_BYTES + 1)
            return _edit_bytes(walk, name, raw, shown, old, new, replace_all)
    except IsADirectoryError as exc:
        raise ToolFailure(f"{shown} is a directory") from exc
    except OSError as exc:
        raise _os_failure(exc, shown) from exc


def _edit_bytes(
    walk: WorkspaceWalk,
    name: str,
    raw: bytes,
    shown: str,
    old: str,
    new: str,
    replace_all: bool,
) -> str:
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
    atomic_write(walk.fd, name, updated.encode("utf-8"))
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
    walk, parts, shown = _prepare(ctx, path)
    return await asyncio.to_thread(_edit, walk, parts, shown, old_string, new_string, replace_all)


# --------------------------------------------------------------------------- list / glob / grep


def _list(walk: WorkspaceWalk, parts: list[str], shown: str) -> str:
    try:
        with walk:
            fd = walk.open_dir(walk.descend(parts, shown), shown)
            try:
                with os.scandir(fd) as it:
                    entries = sorted(it, key=lambda e: e.name)
                links = {e.name: os.readlink(e.name, dir_fd=fd) for e in entries if e.is_symlink()}
            finally:
                os.close(fd)
    except OSError as exc:
        raise _os_failure(exc, shown) from exc
    lines: list[str] = []
    for entry in entries[:LIST_MAX_ENTRIES]:
        if entry.name in links:
            lines.append(f"{entry.name} -> {links[entry.name]}")
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
    walk, parts, shown = _prepare(ctx, path)
    return await asyncio.to_thread(_list, walk, parts, shown)


def _check_pattern(pattern: str) -> None:
    if "\x00" in pattern:
        raise ToolFailure("refused: the pattern contains a NUL byte")
    if not pattern or os.path.isabs(pattern):
        raise ToolFailure(
            f"refused: glob pattern {pattern!r} must be relative to the workspace (e.g. '**/*.py')"
        )
    if ".." in Path(pattern).parts:
        raise ToolFailure(f"refused: glob pattern {pattern!r} climbs out with '..'")


def _kind_inside(root: Path, protected: Sequence[Path], rel: str) -> str:
    """What ``rel`` is when walked race-free: "dir", "file", "outside" or "gone"."""
    try:
        with WorkspaceWalk(root, protected=protected) as walk:
            name = walk.descend(Path(rel).parts, rel)
            if not name:
                return "dir"
            st = os.stat(name, dir_fd=walk.fd, follow_symlinks=False)
            return "dir" if stat.S_ISDIR(st.st_mode) else "file"
    except WorkspaceEscapeError:
        return "outside"
    except (ToolFailure, OSError):
        return "gone"


def _within_any(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _glob(root: Path, protected: Sequence[Path], base: Path, pattern: str) -> str:
    # pathlib lists the candidates (names only); each is then checked by a race-free walk,
    # so nothing leading outside, or into GEODE's files, is reported.
    found: list[str] = []
    outside = 0
    seen = 0
    visited = 0
    for match in base.glob(pattern):
        visited += 1
        if visited > GLOB_MAX_VISITED:
            break
        rel = display_path(root, match)
        if len(found) >= GLOB_MAX_RESULTS:
            # past the listed ones only a count is reported: a realpath check is enough
            real = Path(os.path.realpath(match))
            if _within_any(real, [root]) and not _within_any(real, protected):
                seen += 1
            else:
                outside += 1
            continue
        kind = _kind_inside(root, protected, rel)
        if kind == "outside":
            outside += 1
            continue
        if kind == "gone":
            continue
        seen += 1
        if len(found) < GLOB_MAX_RESULTS:
            found.append(rel + ("/" if kind == "dir" else ""))
    lines = sorted(found)
    if seen > len(found):
        lines.append(f"[... {seen - len(found)} more matches not shown ...]")
    if outside:
        lines.append(f"[{outside} matches leading outside the workspace through symlinks omitted]")
    if visited > GLOB_MAX_VISITED:
        lines.append(f"[search stopped after {GLOB_MAX_VISITED} paths; narrow the pattern]")
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
    protected = protected_paths(ctx, root)
    kind = await asyncio.to_thread(_kind_inside, root, protected, display_path(root, base))
    if kind == "outside":
        with WorkspaceWalk(root, protected=protected) as walk:  # raises its refusal
            walk.descend(split_user_path(root, path), path)
    if kind != "dir":
        raise ToolFailure(f"{display_path(root, base)} is not a directory")
    return await asyncio.to_thread(_glob, root, protected, base, pattern)


@dataclass
class _GrepTally:
    hits: list[str]
    #: GEODE's own files: a file found under another name (a hard link) is skipped
    own: frozenset[Inode] = frozenset()
    total: int = 0
    skipped_binary: int = 0
    skipped_large: int = 0


def _grep_fd(fd: int, shown: str, regex: Any, cap: int, tally: _GrepTally, stop: Any) -> None:
    with os.fdopen(fd, "rb") as fh:
        try:
            st = refuse_own(fh.fileno(), shown, tally.own)
        except WorkspaceEscapeError:
            return  # GEODE's own file under another name: not searched, like its home
        if not stat.S_ISREG(st.st_mode):
            return
        if st.st_size > GREP_MAX_FILE_BYTES:
            tally.skipped_large += 1
            return
        if _is_binary(fh.read(BINARY_SNIFF_BYTES)):
            tally.skipped_binary += 1
            return
        fh.seek(0)
        data = fh.read(GREP_MAX_FILE_BYTES + 1)
    # RE2 searches the UTF-8 bytes as they are (no decode/encode per line: its Python
    # wrapper costs ~15 us per call on str, half on bytes)
    if not regex.search(data):
        return  # one pass over the whole file; most files of a search do not match
    for lineno, raw in enumerate(data.splitlines(), start=1):
        if lineno % 1000 == 0 and stop.is_set():
            return
        if regex.search(raw):
            tally.total += 1
            if len(tally.hits) < cap:
                line = raw.decode("utf-8", "replace")
                tally.hits.append(f"{shown}:{lineno}:{truncate(line, 500)}")


def _grep_tree(
    walk: WorkspaceWalk,
    top: str,
    regex: Any,
    name_glob: str | None,
    cap: int,
    tally: _GrepTally,
    stop: threading.Event,
    protected: Sequence[Path],
) -> None:
    # fwalk holds directory fds and never follows a symlink: a swapped directory is skipped
    for dirpath, dirnames, filenames, dirfd in os.fwalk(top or ".", dir_fd=walk.fd):
        if stop.is_set():
            return
        here = Path(os.path.normpath(walk.path() / dirpath))
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in GREP_SKIP_DIRS and not _is_protected(here / d, protected)
        )
        for name in sorted(filenames):
            if stop.is_set():
                return
            if name_glob and not fnmatch.fnmatch(name, name_glob):
                continue
            if _is_protected(here / name, protected) or is_own_name(name, dirfd, tally.own):
                continue  # GEODE's own files: not even opened (see is_own_name)
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=dirfd)
            except OSError:
                continue  # a symlink (ELOOP), gone, or unreadable
            shown = display_path(walk.root, here / name)
            try:
                _grep_fd(fd, shown, regex, cap, tally, stop)
            except OSError:
                continue


def _is_protected(path: Path, protected: Sequence[Path]) -> bool:
    return any(path == p or p in path.parents for p in protected)


def _grep(
    walk: WorkspaceWalk,
    parts: list[str],
    shown: str,
    regex: Any,
    name_glob: str | None,
    cap: int,
    stop: threading.Event,
    protected: Sequence[Path],
) -> str:
    tally = _GrepTally(hits=[], own=walk.own)
    try:
        with walk:
            name = walk.descend(parts, shown)
            st = os.stat(name or ".", dir_fd=walk.fd, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                _grep_fd(walk.open_file(name, shown), shown, regex, cap, tally, stop)
            else:
                _grep_tree(walk, name, regex, name_glob, cap, tally, stop, protected)
    except FileNotFoundError as exc:
        raise ToolFailure(f"{shown} does not exist") from exc
    except OSError as exc:
        raise _os_failure(exc, shown) from exc
    lines = tally.hits
    if tally.total > len(tally.hits):
        lines.append(f"[... {tally.total - len(tally.hits)} more matches not shown ...]")
    if tally.skipped_binary or tally.skipped_large:
        lines.append(
            f"[skipped {tally.skipped_binary} binary files and {tally.skipped_large} files over "
            f"{GREP_MAX_FILE_BYTES} bytes]"
        )
    if stop.is_set():
        lines.append("[search stopped before the end: the call was cancelled]")
    if not tally.hits:
        lines.insert(0, "(no matches)")
    return truncate("\n".join(lines), OUTPUT_CAP_CHARS)


def _compile(pattern: str, ignore_case: bool) -> Any:
    """RE2: linear time in the text, so no pattern can freeze the search (no backtracking)."""
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not ignore_case
    try:
        return re2.compile(pattern, options=options)
    except re2.error as exc:
        raise ToolFailure(
            f"invalid regular expression {pattern!r} (RE2 syntax: no backreferences or "
            f"lookaround): {exc}"
        ) from exc


@tool(safety="read_only", resource_keys=_dir_key)
async def grep(
    ctx: ToolContext,
    pattern: Annotated[
        str, Field(description="Regular expression (RE2: no backreferences or lookaround)")
    ],
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
    regex = _compile(pattern, ignore_case)
    if glob is not None and ("/" in glob or "\x00" in glob):
        raise ToolFailure("glob filters file names only (e.g. '*.py'); use path for directories")
    walk, parts, shown = _prepare(ctx, path)
    protected = protected_paths(ctx, walk.root)
    stop = threading.Event()
    try:
        return await asyncio.to_thread(
            _grep, walk, parts, shown, regex, glob, max_results, stop, protected
        )
    finally:
        # cancelled at the deadline: the worker thread notices and ends its walk
        stop.set()
