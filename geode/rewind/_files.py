"""Capturing a workspace path's pre-image, a workspace snapshot and its diff, and putting
paths back. All of it is plain blocking file I/O, run in a worker thread by the callers.

Paths are kept relative to the workspace's real path and are resolved under it again on
restore: a record can never name a file outside its workspace.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from geode.rewind._blobs import BlobStore, PreState, write_atomic

__all__ = ["Snapshot", "capture", "diff", "restore", "snapshot"]

#: a file's identity for "did it change": device, inode, size, mtime and ctime (ns)
StatKey = tuple[int, int, int, int, int]


def _key(st: os.stat_result) -> StatKey:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def capture(blobs: BlobStore, root: Path, rel: str, *, max_bytes: int) -> PreState | None:
    """``root/rel`` as it is now; None when it cannot be kept (a directory, another kind of
    file, or a file over ``max_bytes``)."""
    path = root / rel
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return PreState(kind="absent")
    if stat.S_ISLNK(st.st_mode):
        return PreState(kind="link", target=os.readlink(path))
    if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
        return None
    data = _read(path)
    return PreState(kind="file", blob=blobs.put(data), mode=stat.S_IMODE(st.st_mode),
                    size=len(data))


def _read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def missing_dirs(root: Path, rel: str) -> list[str]:
    """The parent directories of ``rel`` that do not exist yet (a write would create them)."""
    out = []
    parent = Path(rel).parent
    while str(parent) not in ("", "."):
        if (root / parent).exists():
            break
        out.append(str(parent))
        parent = parent.parent
    return out


@dataclass(kw_only=True)
class Snapshot:
    """A workspace before a command: every entry's stat identity, and the pre-image of
    each file captured within the bound (``uncaptured``: files the bound left out)."""

    root: Path
    entries: dict[str, StatKey] = field(default_factory=dict)
    states: dict[str, PreState] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    uncaptured: set[str] = field(default_factory=set)


def _walk(root: Path, skip: Sequence[Path]) -> Iterable[tuple[str, os.stat_result, bool]]:
    """Every entry under ``root`` (relative path, lstat, is a directory), never through a
    symlink, leaving out ``skip`` (GEODE's own files, rewind's blobs)."""
    stack = [root]
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            path = Path(entry.path)
            if any(path == s or s in path.parents for s in skip):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            yield os.path.relpath(path, root), st, is_dir
            if is_dir:
                stack.append(path)


def snapshot(blobs: BlobStore, root: Path, *, max_bytes: int, skip: Sequence[Path],
             known: dict[StatKey, str]) -> Snapshot:
    """Capture ``root`` before a command. New blob bytes are bounded by ``max_bytes``; a file
    whose identity is in ``known`` (captured before, unchanged since) costs no read."""
    snap = Snapshot(root=root)
    budget = max_bytes
    for rel, st, is_dir in _walk(root, skip):
        if is_dir:
            snap.dirs.add(rel)
            continue
        key = _key(st)
        snap.entries[rel] = key
        if stat.S_ISLNK(st.st_mode):
            with contextlib.suppress(OSError):
                snap.states[rel] = PreState(kind="link", target=os.readlink(root / rel))
            continue
        if not stat.S_ISREG(st.st_mode):
            snap.uncaptured.add(rel)
            continue
        sha = known.get(key)
        if sha is not None and blobs.has(sha):
            snap.states[rel] = PreState(kind="file", blob=sha, mode=stat.S_IMODE(st.st_mode),
                                        size=st.st_size)
            continue
        if st.st_size > budget:
            snap.uncaptured.add(rel)
            continue
        try:
            data = _read(root / rel)
        except OSError:
            snap.uncaptured.add(rel)
            continue
        budget -= len(data)
        sha = blobs.put(data)
        known[key] = sha
        snap.states[rel] = PreState(kind="file", blob=sha, mode=stat.S_IMODE(st.st_mode),
                                    size=len(data))
    return snap


@dataclass(frozen=True, kw_only=True)
class Changes:
    """What a command changed: each changed path's pre-state, the directories it created,
    and the paths it changed that the snapshot could not keep."""

    files: dict[str, PreState]
    dirs: list[str]
    lost: list[str]
    kept_bytes: int


def diff(before: Snapshot, *, skip: Sequence[Path]) -> Changes:
    """Compare the workspace now with ``before``."""
    files: dict[str, PreState] = {}
    lost: list[str] = []
    now_dirs: set[str] = set()
    seen: set[str] = set()
    for rel, st, is_dir in _walk(before.root, skip):
        if is_dir:
            now_dirs.add(rel)
            if rel not in before.dirs and rel in before.entries:
                _changed(rel, before, files, lost)  # a file replaced by a directory
            continue
        seen.add(rel)
        old = before.entries.get(rel)
        if old is None:
            files[rel] = PreState(kind="absent")
        elif old != _key(st):
            _changed(rel, before, files, lost)
    for rel in before.entries.keys() - seen:
        _changed(rel, before, files, lost)  # deleted (or became a directory)
    created = sorted(now_dirs - before.dirs, key=lambda d: d.count(os.sep), reverse=True)
    kept = sum(s.size for s in files.values() if s.kind == "file")
    return Changes(files=files, dirs=created, lost=sorted(lost), kept_bytes=kept)


def _changed(rel: str, before: Snapshot, files: dict[str, PreState], lost: list[str]) -> None:
    state = before.states.get(rel)
    if state is None:
        lost.append(rel)
    else:
        files[rel] = state


def _inside(root: Path, rel: str) -> Path:
    path = Path(os.path.normpath(root / rel))
    if path == root or root not in path.parents:
        raise OSError(f"{rel!r} is not inside the workspace")
    # the parent must resolve inside the workspace too (no symlinked directory on the way)
    parent = Path(os.path.realpath(path.parent))
    if parent != root and root not in parent.parents:
        raise OSError(f"{rel!r} leads outside the workspace")
    return path


def _remove(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        import shutil

        shutil.rmtree(path)
    else:
        path.unlink()


def restore(blobs: BlobStore, root: Path, rel: str, state: PreState) -> bool:
    """Put ``root/rel`` back as ``state`` says; True when something changed. Idempotent:
    a path already as it was is left alone."""
    path = _inside(root, rel)
    if state.kind == "absent":
        existed = os.path.lexists(path)
        _remove(path)
        return existed
    if state.kind == "link":
        if os.path.islink(path) and os.readlink(path) == state.target:
            return False
        _remove(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(state.target, path)
        return True
    data = blobs.get(state.blob)
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_size == len(data) and _read(path) == data:
            if stat.S_IMODE(st.st_mode) != state.mode:
                os.chmod(path, state.mode)
            return False
    if os.path.lexists(path) and (os.path.isdir(path) or os.path.islink(path)):
        _remove(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)
    os.chmod(path, state.mode)
    return True


def remove_empty_dirs(root: Path, dirs: Iterable[str]) -> None:
    """Remove directories a call created, deepest first, when nothing is left in them."""
    for rel in sorted(dirs, key=lambda d: d.count(os.sep), reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(_inside(root, rel))
