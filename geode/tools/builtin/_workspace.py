"""Workspace confinement and output caps shared by the built-in tools.

Two layers:

- :func:`resolve_in_workspace` maps a user path to a real path inside the workspace
  (lexically and with ``realpath``). It names resource keys and refuses what is plainly
  outside, early and with a clear message; it is *not* what protects the file system.
- :class:`WorkspaceWalk` is the boundary: every file tool opens what it touches by walking
  from a directory fd of the workspace one component at a time with ``O_NOFOLLOW``, following
  a symlink only by reading it and walking its target the same way (within the workspace).
  Nothing is ever opened by a path the kernel resolves, so a directory swapped for a symlink
  between a check and a use cannot lead outside: the swap makes the call fail instead.
  Writes create their temp file with ``O_EXCL`` in the held directory fd and rename within it.

GEODE's own files (``$GEODE_HOME``, the store; ``ctx.deps.protected_paths``) are refused
wherever they are, also when the workspace contains them. A name is not enough: a hard link
to ``$GEODE_HOME/.env`` placed in the workspace has a name of its own and no path check can
see it. So every file a tool reads is also checked *on its opened fd* (``fstat``: device and
inode) against the inodes of GEODE's own files (:func:`own_inodes`), whatever its name or
link count; the check is on what was opened, so a swap between a check and the read cannot
get past it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from geode.tools.base import ToolContext
from geode.tools.errors import ToolFailure, WorkspaceEscapeError

__all__ = [
    "Inode",
    "WorkspaceWalk",
    "atomic_write",
    "display_path",
    "is_own_name",
    "own_inodes",
    "own_links",
    "path_key",
    "protected_paths",
    "refuse_own",
    "resolve_in_workspace",
    "split_user_path",
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


def atomic_write(parent_fd: int, name: str, data: bytes) -> None:
    """Write ``data`` to ``name`` in the directory ``parent_fd`` via a temp file and rename.

    The temp file is created with ``O_EXCL | O_NOFOLLOW`` next to the target, inside the held
    directory fd; the rename replaces a symlink at the destination instead of following it.
    Readers see the old or the new content, never a partial file; an existing file's
    permission bits are kept. Blocking: call through ``asyncio.to_thread``.
    """
    try:
        old = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        mode = stat.S_IMODE(old.st_mode) if stat.S_ISREG(old.st_mode) else None
    except FileNotFoundError:
        mode = None
    if mode is None:
        mode = 0o666 & ~_current_umask()
    tmp = f".{name[:200]}.{os.urandom(6).hex()}.geode-tmp"  # = secrets.token_hex(6)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=parent_fd)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), mode)
        os.rename(tmp, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=parent_fd)
        except OSError:
            pass
        raise


#: what GEODE keeps in its home (secrets, config, store, ledger, socket, logs, workspaces)
HOME_ENTRIES = (
    ".env",
    "config.toml",
    "geode.db",
    "geode.db-wal",
    "geode.db-shm",
    "geode.db-journal",
    "cli.sock",
    "serve.lock",
    "serve.log",
    "repl_history",
    "ledger",
    "trusted_projects.json",
    "rewind",
    "workspace",
    "workspaces",
)
#: symlinks followed at most while resolving one path (the kernel's own limit is 40)
_MAX_HOPS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: O_NONBLOCK: opening a FIFO must not wait for a writer (the file is refused after fstat)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


#: entries of GEODE's home that hold the users' files, not GEODE's own
_USER_DIRS = frozenset({"workspace", "workspaces"})
#: entries looked at at most while listing GEODE's own files (a huge ledger stops here)
_OWN_SCAN_MAX = 20_000

Inode = tuple[int, int]


def _add_inode(out: set[Inode], path: Path | str, *, follow: bool) -> None:
    try:
        st = os.stat(path, follow_symlinks=follow)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode):
        out.add((st.st_dev, st.st_ino))


def _scan_own(top: Path, root: Path | None, out: set[Inode], budget: list[int]) -> None:
    """Add the inodes of the files under ``top`` (GEODE's own) to ``out``.

    A directory holding the workspace ``root`` (GEODE's home when the workspaces live in it,
    or a home that *is* the workspace) gives only its :data:`HOME_ENTRIES`; the users' dirs
    (``workspace``/``workspaces``) are never GEODE's own.
    """
    try:
        entries = list(os.scandir(top))
    except OSError:
        return
    holds_root = root is not None and (top == root or top in root.parents)
    for entry in entries:
        budget[0] -= 1
        if budget[0] < 0:
            return
        if entry.name in _USER_DIRS or (holds_root and entry.name not in HOME_ENTRIES):
            continue
        path = Path(entry.path)
        if root is not None and (path == root or path in root.parents):
            continue
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if is_dir:
            _scan_own(path, root, out, budget)
            continue
        _add_inode(out, path, follow=False)
        _add_inode(out, path, follow=True)  # a symlink in the home: what it points to, too


def own_inodes(paths: object, root: Path | None = None) -> frozenset[Inode]:
    """(st_dev, st_ino) of every file of GEODE's own under ``paths`` (files, or directories
    scanned: GEODE's home, the store's files, the Codex login...), as they are now.

    ``paths`` is ``ctx.deps.protected_paths`` as given (unfiltered: a home holding the
    workspace still has its ``.env``); ``root`` the workspace, whose files are not GEODE's.
    Blocking (a few ``stat`` calls): run it in the tool's thread.
    """
    out: set[Inode] = set()
    budget = [_OWN_SCAN_MAX]
    seq = paths if isinstance(paths, Sequence) and not isinstance(paths, str) else ()
    for p in seq:
        real = Path(os.path.realpath(p))
        if real.is_dir():
            _scan_own(real, root, out, budget)
        else:
            _add_inode(out, p, follow=False)
            _add_inode(out, real, follow=True)
    return frozenset(out)


#: entries of a workspace looked at at most for links to GEODE's files (run_bash's scan)
OWN_LINKS_SCAN_MAX = 200_000


def own_links(root: Path, own: frozenset[Inode], *, limit: int = OWN_LINKS_SCAN_MAX
              ) -> list[Path]:
    """Files under the workspace ``root`` that are GEODE's own under another name (hard
    links: more than one link, an inode of ``own``), for ``run_bash`` to mask.

    Only a file on a device of GEODE's files can be one (a hard link never crosses file
    systems), so most workspaces elsewhere cost one ``stat``. Symlinks are not followed;
    the walk stops after ``limit`` entries. Blocking: run it in a thread."""
    if not own:
        return []
    devices = {dev for dev, _ in own}
    try:
        if os.stat(root).st_dev not in devices:
            return []
    except OSError:
        return []
    found: list[Path] = []
    seen = 0
    stack = [str(root)]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                seen += 1
                if seen > limit:
                    return found
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                        continue
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_nlink > 1 and (st.st_dev, st.st_ino) in own:
                    found.append(Path(entry.path))
    return found


def refuse_own(fd: int, shown: str, own: frozenset[Inode]) -> os.stat_result:
    """``fstat`` of the opened ``fd``; refused when its inode is one of GEODE's own files."""
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) in own:
        raise _own_refusal(shown)
    return st


def is_own_name(name: str, dir_fd: int, own: frozenset[Inode]) -> bool:
    """Whether ``name`` in ``dir_fd`` (not followed) is one of GEODE's own files, looked up
    WITHOUT opening it: closing any descriptor of the SQLite store drops every lock this
    process holds on it, and another process may then delete the WAL serve writes into
    (issue #30). So GEODE's own files are refused before ``open``, and :func:`refuse_own`
    on the fd only catches a swap between this look and the open."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False  # absent or unreadable: the open says so
    return (st.st_dev, st.st_ino) in own


def _own_refusal(shown: str) -> WorkspaceEscapeError:
    return WorkspaceEscapeError(
        f"refused: {shown!r} is one of GEODE's own files (the same file under another "
        "name, e.g. a hard link); no tool may read it"
    )


def protected_paths(ctx: ToolContext, root: Path) -> list[Path]:
    """GEODE's own paths the tools must never reach from workspace ``root``.

    A protected directory that *contains* the workspace (the per-channel workspaces live
    under ``$GEODE_HOME/workspaces/``) is unreachable from it anyway and is left out.

    When the workspace *is* GEODE's home, its own entries (:data:`HOME_ENTRIES`) are.
    """
    value = ctx.deps.protected_paths
    out: list[Path] = []
    for p in value if isinstance(value, Sequence) and not isinstance(value, str) else ():
        real = Path(os.path.realpath(p))
        if real == root:
            # the workspace is GEODE's home itself (`geode repl` run in it): GEODE's own
            # entries in it stay out of reach, the rest is the user's
            out += [real / name for name in HOME_ENTRIES]
        elif real not in root.parents:
            out.append(real)
    return out


class WorkspaceWalk:
    """Directory fds from the workspace root down to one directory, walked race-free.

    Use as a context manager (the fds are closed on exit); blocking, run it in a thread.
    """

    def __init__(self, root: Path, *, protected: Sequence[Path] = (),
                 own: frozenset[Inode] = frozenset()) -> None:
        self.root = Path(os.path.realpath(root))
        self._protected = tuple(protected)
        #: inodes of GEODE's own files: a file opened here that is one of them is refused
        self.own = own
        self._fds = [os.open(self.root, _DIR_FLAGS)]
        self._names: list[str] = []

    def __enter__(self) -> WorkspaceWalk:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.pop())
        self._names.clear()

    @property
    def fd(self) -> int:
        """The directory the walk stands in."""
        return self._fds[-1]

    def path(self, name: str = "") -> Path:
        """The real path of ``name`` in the current directory (the directory itself if empty)."""
        return self.root.joinpath(*self._names, *([name] if name else []))

    def _check_protected(self, shown: str, name: str = "") -> None:
        here = self.path(name)
        for p in self._protected:
            if here == p or p in here.parents:
                raise WorkspaceEscapeError(
                    f"refused: {shown!r} is inside GEODE's own files ({p}); "
                    "no tool may read or write them"
                )

    def _reset(self) -> None:
        while len(self._fds) > 1:
            os.close(self._fds.pop())
        self._names.clear()

    def _up(self, shown: str, hops: int) -> None:
        if not self._names:
            if hops:
                raise WorkspaceEscapeError(
                    f"refused: {shown!r} resolves through a symlink to a place outside the "
                    f"workspace ({self.root})"
                )
            raise WorkspaceEscapeError(
                f"refused: {shown!r} climbs out of the workspace ({self.root}) with '..'"
            )
        os.close(self._fds.pop())
        self._names.pop()

    def _link_parts(self, name: str, shown: str) -> list[str]:
        target = os.readlink(name, dir_fd=self.fd)
        if not os.path.isabs(target):
            return target.split("/")
        norm = Path(os.path.normpath(target))
        if not _within(norm, self.root):
            raise WorkspaceEscapeError(
                f"refused: {shown!r} resolves through a symlink to {target!r}, "
                f"outside the workspace ({self.root})"
            )
        self._reset()
        return list(norm.relative_to(self.root).parts)

    def descend(self, parts: Sequence[str], shown: str, *, create_dirs: bool = False) -> str:
        """Walk ``parts`` (symlinks followed within the workspace, the last one too).

        Returns the last component's name in the directory the walk then stands in (it may
        not exist), or ``""`` when the path is that directory itself. Missing directories on
        the way are created when ``create_dirs``, else FileNotFoundError.
        """
        queue = deque(parts)
        hops = 0
        while queue:
            part = queue.popleft()
            if part in ("", "."):
                continue
            if part == "..":
                self._up(shown, hops)
                continue
            self._check_protected(shown, part)
            try:
                st = os.stat(part, dir_fd=self.fd, follow_symlinks=False)
            except FileNotFoundError:
                if not queue:
                    return part
                if not create_dirs:
                    raise
                try:
                    os.mkdir(part, 0o777, dir_fd=self.fd)
                except FileExistsError:
                    pass
                queue.appendleft(part)
                continue
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > _MAX_HOPS:
                    raise ToolFailure(f"{shown}: too many levels of symbolic links")
                queue.extendleft(reversed(self._link_parts(part, shown)))
                continue
            if not queue:
                return part
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", part)
            try:
                fd = os.open(part, _DIR_FLAGS, dir_fd=self.fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                    raise
                # replaced between the stat and the open: look at it again
                hops += 1
                if hops > _MAX_HOPS:
                    raise ToolFailure(f"{shown}: the path keeps changing; try again") from exc
                queue.appendleft(part)
                continue
            self._fds.append(fd)
            self._names.append(part)
        self._check_protected(shown)
        return ""

    def open_file(self, name: str, shown: str) -> int:
        """An fd of the regular file ``name`` in the current directory (never a symlink)."""
        if not name:
            raise IsADirectoryError(errno.EISDIR, "is a directory", shown)
        if is_own_name(name, self.fd, self.own):  # never open (and close) the store's fd
            raise _own_refusal(shown)
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ToolFailure(
                    f"{shown} was replaced by a symlink while it was opened; refused"
                ) from exc
            raise
        try:
            # checked on the opened fd: a hard link to GEODE's .env (or a swap to one
            # between any earlier look and this open) is refused here, whatever its name
            st = refuse_own(fd, shown, self.own)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory", shown)
            if not stat.S_ISREG(st.st_mode):
                raise ToolFailure(
                    f"refused: {shown} is not a regular file (a FIFO, socket or device); "
                    "only regular files are read"
                )
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_dir(self, name: str, shown: str) -> int:
        """A new fd of the directory ``name`` in the current one (``""``: the current one)."""
        try:
            return os.open(name or ".", _DIR_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ToolFailure(
                    f"{shown} was replaced by a symlink while it was opened; refused"
                ) from exc
            raise


def split_user_path(root: Path, user_path: str) -> list[str]:
    """``user_path`` as components relative to the workspace ``root`` (``..`` kept).

    Raises:
        WorkspaceEscapeError: NUL byte, or an absolute path outside the workspace.
    """
    if "\x00" in user_path:
        raise WorkspaceEscapeError("refused: the path contains a NUL byte")
    raw = Path(user_path or ".")
    if not raw.is_absolute():
        return list(raw.parts)
    real_root = Path(os.path.realpath(root))
    lexical = Path(os.path.normpath(raw))
    for base in (Path(os.path.normpath(root)), real_root):
        if _within(lexical, base):
            return list(lexical.relative_to(base).parts)
    raise WorkspaceEscapeError(
        f"refused: absolute path {user_path!r} is outside the workspace ({real_root}); "
        "use a path inside the workspace"
    )
