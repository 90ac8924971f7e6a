"""Workspace confinement and output caps shared by the built-in tools.

Invariant: every path a built-in file tool touches went through :func:`resolve_in_workspace`,
whose result is a *real* path (symlinks resolved) under the *real* workspace root.

Known limit (TOCTOU): a symlink swapped in between the check and the open is not caught here.
Writes go through :func:`atomic_write`, whose final ``os.replace`` never follows a symlink at
the destination; an intermediate directory replaced by a symlink in that window is the
remaining gap. The executor's resource locks serialise our own tools on the same path.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from geode.tools.base import ToolContext
from geode.tools.errors import ToolFailure, WorkspaceEscapeError

__all__ = [
    "atomic_write",
    "display_path",
    "path_key",
    "resolve_in_workspace",
    "truncate",
    "workspace_root",
]


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolve_in_workspace(root: Path, user_path: str) -> Path:
    """Resolve ``user_path`` (relative to ``root``, or absolute) to a real path inside ``root``.

    Raises:
        WorkspaceEscapeError: NUL byte, absolute path outside the root, ``..`` climbing out,
            or a symlink (final or intermediate, dangling included) leading outside.
    """
    if "\x00" in user_path:
        raise WorkspaceEscapeError("refused: the path contains a NUL byte")
    real_root = Path(os.path.realpath(root))
    raw = Path(user_path or ".")
    if raw.is_absolute():
        lexical = Path(os.path.normpath(raw))
        if not (_within(lexical, Path(os.path.normpath(root))) or _within(lexical, real_root)):
            raise WorkspaceEscapeError(
                f"refused: absolute path {user_path!r} is outside the workspace ({real_root}); "
                "use a path inside the workspace"
            )
        candidate = lexical
    else:
        if Path(os.path.normpath(raw)).parts[:1] == ("..",):
            raise WorkspaceEscapeError(
                f"refused: {user_path!r} climbs out of the workspace ({real_root}) with '..'"
            )
        candidate = real_root / raw
    # realpath follows every symlink on the way, intermediate directories and dangling links
    # included, and keeps a non-existent tail as written.
    resolved = Path(os.path.realpath(candidate))
    if not _within(resolved, real_root):
        raise WorkspaceEscapeError(
            f"refused: {user_path!r} resolves through a symlink to {str(resolved)!r}, "
            f"outside the workspace ({real_root})"
        )
    # For a path that does not exist yet, what will be created lands in its nearest existing
    # ancestor: that one must really be inside too.
    probe = resolved
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if not _within(Path(os.path.realpath(probe)), real_root):
        raise WorkspaceEscapeError(
            f"refused: {user_path!r} would be created under {str(probe)!r}, "
            f"outside the workspace ({real_root})"
        )
    return resolved


def workspace_root(ctx: ToolContext) -> Path:
    """The real path of the session's workspace; it must be an existing directory."""
    root = Path(os.path.realpath(ctx.workspace))
    if not root.is_dir():
        raise ToolFailure(f"the workspace {ctx.workspace} does not exist or is not a directory")
    return root


def display_path(root: Path, path: Path) -> str:
    """``path`` as the model should see it: relative to the workspace root."""
    return os.path.relpath(path, root)


def path_key(prefix: str, ctx: ToolContext, user_path: str) -> str:
    """A resource key ``<prefix>:<resolved abs path>`` for locks.

    Never raises: a refused path still gets a (lexical) key; the handler refuses it later.
    """
    try:
        return f"{prefix}:{resolve_in_workspace(ctx.workspace, user_path)}"
    except WorkspaceEscapeError:
        base = Path(os.path.realpath(ctx.workspace))
        return f"{prefix}:{os.path.normpath(base / user_path.replace(chr(0), ''))}"


def truncate(text: str, cap: int, *, keep_tail: int = 0) -> str:
    """Cut ``text`` to ``cap`` chars with an explicit ``[... truncated N chars ...]`` marker.

    ``keep_tail`` chars of the end are kept too (the end of a command's output is where
    its errors are).
    """
    if len(text) <= cap:
        return text
    keep_tail = min(keep_tail, cap)
    head = text[: cap - keep_tail]
    tail = text[len(text) - keep_tail :] if keep_tail else ""
    dropped = len(text) - len(head) - len(tail)
    marker = f"[... truncated {dropped} chars ...]"
    return f"{head}\n{marker}\n{tail}" if tail else f"{head}\n{marker}"


def _current_umask() -> int:
    # os.umask() can only be read by setting it, which races with other threads; Linux
    # reports it in /proc/self/status.
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same directory and ``os.replace``.

    Readers see the old or the new content, never a partial file; an existing file's
    permission bits are kept. Blocking: call through ``asyncio.to_thread``.
    """
    try:
        mode: int | None = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".geode-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        else:
            # mkstemp creates 0600; a new file gets the usual umask-derived mode.
            os.chmod(tmp, 0o666 & ~_current_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
