"""The skills one session is offered, and opening one (progressive disclosure).

The system prompt lists each offered skill's name and description only
(:meth:`OfferedSkills.listing`); the ``skill`` tool opens one: its instructions come back as
the tool's result and its files are copied into the workspace under ``.skills/NAME/``, where
the confined file tools read them and ``run_bash`` (under the session's policy, in its
sandbox) runs its scripts. Nothing outside the workspace becomes reachable.

The copy takes regular files only: a symlink in a skill folder is left out, so a skill
cannot hand the model a path to a file outside it (``~/.geode/.env``). The copy is
bounded (:data:`MAX_FILES`, :data:`MAX_BYTES`) and replaces what is at ``.skills/NAME``;
a symlink planted there is removed, never followed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from geode.errors import RunError
from geode.skills._skill import SKILL_FILE, Skill, SkillError

__all__ = ["MAX_BYTES", "MAX_FILES", "SKILLS_DIR", "OfferedSkills", "SkillOpenError"]

#: the workspace folder opened skills' files are copied to
SKILLS_DIR = ".skills"
MAX_FILES = 200
MAX_BYTES = 20 * 1024 * 1024


class SkillOpenError(RunError):
    """A skill could not be opened (the tool turns it into its failure text)."""


class OfferedSkills:
    """The skills of one session (``ctx.deps.skills``)."""

    def __init__(self, skills: Sequence[Skill]) -> None:
        self._skills = {s.name: s for s in skills}

    def __bool__(self) -> bool:
        return bool(self._skills)

    def names(self) -> list[str]:
        return sorted(self._skills)

    def listing(self) -> list[tuple[str, str]]:
        """(name, description) of each, for the system prompt."""
        return [(n, self._skills[n].description) for n in self.names()]

    def open(self, name: str, workspace: Path) -> str:
        """Copy skill ``name``'s files into ``workspace`` and return its instructions.

        Raises:
            SkillOpenError: no such skill is offered, or it cannot be read or copied.
        """
        skill = self._skills.get(name)
        if skill is None:
            offered = ", ".join(self.names()) or "none"
            raise SkillOpenError(f"no skill {name!r} is offered here; skills: {offered}")
        try:
            body = skill.instructions()
        except SkillError as exc:
            raise SkillOpenError(str(exc)) from None
        copied, left = _copy_files(skill.folder, workspace / SKILLS_DIR, name)
        where = f"{SKILLS_DIR}/{name}/"
        lines = [f'Skill "{name}": its instructions follow.']
        if copied:
            shown = ", ".join(copied[:50]) + (", ..." if len(copied) > 50 else "")
            lines.append(f"Its files are in your workspace under {where}: {shown}. Read them "
                         "with the file tools; run a script only with run_bash, where this "
                         "session allows it.")
        if left:
            lines.append(f"Not copied: {'; '.join(left[:10])}.")
        return "\n".join(lines) + f'\n\n<skill name="{name}">\n{body}\n</skill>'


#: a folder opened by its fd, never through a symlink (the last component is checked by
#: the kernel; every earlier one was opened the same way)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _open_dir(name: str, parent_fd: int) -> int:
    """The fd of folder ``name`` in ``parent_fd``, made if missing; a symlink or a file
    there is an OSError (ELOOP / ENOTDIR), never followed."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)


def _clear(name: str, parent_fd: int) -> None:
    """Remove what is at ``name`` in ``parent_fd`` (a folder with its contents, a file, a
    symlink itself: its target is never touched)."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=parent_fd)  # fd-based: does not follow symlinks inside
    else:
        os.unlink(name, dir_fd=parent_fd)


def _copy_files(src: Path, root: Path, name: str) -> tuple[list[str], list[str]]:
    """Copy ``src``'s regular files (SKILL.md aside) to ``root/name``; (copied, left out).

    Every step below the workspace goes through folder fds opened without following
    symlinks: a link planted in the workspace (by a command the session ran) cannot send
    the copy elsewhere, even while the copy runs.
    """
    fds: list[int] = []
    try:
        fds.append(os.open(root.parent, os.O_RDONLY | os.O_DIRECTORY))
        try:
            fds.append(_open_dir(root.name, fds[-1]))
        except OSError:
            raise SkillOpenError(f"{SKILLS_DIR} in the workspace is not a folder; remove "
                                 "it") from None
        _clear(name, fds[-1])
        fds.append(_open_dir(name, fds[-1]))
        return _copy_tree(src, fds[-1])
    except OSError as exc:
        raise SkillOpenError(f"cannot copy the skill's files to {SKILLS_DIR}/{name}: "
                             f"{exc.strerror or exc}") from None
    finally:
        for fd in fds:
            os.close(fd)


def _copy_tree(src: Path, dest_fd: int) -> tuple[list[str], list[str]]:
    copied: list[str] = []
    left: list[str] = []
    total = 0
    for here, dirs, files in os.walk(src, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                         and not os.path.islink(os.path.join(here, d)))
        for fname in sorted(files):
            path = Path(here) / fname
            rel = path.relative_to(src).as_posix()
            if rel == SKILL_FILE or fname.startswith("."):
                continue
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                left.append(f"{rel} (not a regular file)")
                continue
            if len(copied) >= MAX_FILES or total + st.st_size > MAX_BYTES:
                left.append(f"{rel} (over {MAX_FILES} files or {MAX_BYTES // 2**20} MiB)")
                continue
            _copy_one(path, rel.split("/"), dest_fd)
            copied.append(rel)
            total += st.st_size
    return copied, left


def _copy_one(src: Path, parts: list[str], dest_fd: int) -> None:
    """Copy ``src`` to ``parts`` (folders, then the file's name) under ``dest_fd``."""
    fds: list[int] = []
    try:
        parent = dest_fd
        for part in parts[:-1]:
            parent = _open_dir(part, parent)
            fds.append(parent)
        fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
        fds.append(fd_in)
        # a script keeps its executable bit (run_bash runs it)
        mode = 0o755 if os.fstat(fd_in).st_mode & 0o111 else 0o644
        fd_out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                         mode, dir_fd=parent)
        fds.append(fd_out)
        os.fchmod(fd_out, mode)  # the umask does not take the executable bit away
        while chunk := os.read(fd_in, 1 << 20):
            os.write(fd_out, chunk)
    finally:
        for fd in fds:
            os.close(fd)
