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

import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from geode.skills._skill import SKILL_FILE, Skill, SkillError

__all__ = ["MAX_BYTES", "MAX_FILES", "SKILLS_DIR", "OfferedSkills", "SkillOpenError"]

#: the workspace folder opened skills' files are copied to
SKILLS_DIR = ".skills"
MAX_FILES = 200
MAX_BYTES = 20 * 1024 * 1024


class SkillOpenError(Exception):
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


def _copy_files(src: Path, root: Path, name: str) -> tuple[list[str], list[str]]:
    """Copy ``src``'s regular files (SKILL.md aside) to ``root/name``; (copied, left out)."""
    try:
        if root.is_symlink() or (root.exists() and not root.is_dir()):
            raise SkillOpenError(f"{SKILLS_DIR} in the workspace is not a folder; remove it")
        root.mkdir(exist_ok=True)
        dest = root / name
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        elif dest.exists():
            shutil.rmtree(dest)  # does not follow symlinks inside
    except OSError as exc:
        raise SkillOpenError(f"cannot prepare {SKILLS_DIR}/{name}: {exc.strerror}") from None
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
            _copy_one(path, dest / rel)
            copied.append(rel)
            total += st.st_size
    return copied, left


def _copy_one(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            while chunk := os.read(fd_in, 1 << 20):
                os.write(fd_out, chunk)
        finally:
            os.close(fd_out)
        mode = os.fstat(fd_in).st_mode
        if mode & 0o111:  # a script keeps its executable bit (run_bash runs it)
            os.chmod(dst, 0o755)
    finally:
        os.close(fd_in)
