"""Finding skills: the folders of ``$GEODE_HOME/skills`` and of ``[skills] paths``.

Only the operator's folders are read: a project's ``.geode/config.toml`` may not set
``[skills]`` (see :data:`geode.settings.PROJECT_ALLOWED`), so a cloned repository cannot
offer instructions of its own as skills. The first folder that holds a name wins; a later
one of the same name is reported, never silently used.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from geode.skills._skill import SKILL_FILE, Skill, SkillError, parse_skill

if TYPE_CHECKING:
    from geode.settings import Settings

__all__ = ["SkillScan", "find_skills", "skill_dirs"]

#: parsed skills by SKILL.md, valid while its (mtime_ns, size, inode) is unchanged
_PARSED: dict[Path, tuple[tuple[int, int, int], Skill | SkillError]] = {}
_PARSED_MAX = 512


@dataclass(frozen=True, kw_only=True)
class SkillScan:
    """What the skill folders hold: the valid skills by name, and what is wrong."""

    skills: dict[str, Skill] = field(default_factory=dict)
    problems: list[SkillError] = field(default_factory=list)

    def pick(self, names: Sequence[str] | None) -> list[Skill]:
        """The skills named (None: all), in name order; an unknown name is left out (it is
        reported by :meth:`unknown`)."""
        if names is None:
            return [self.skills[n] for n in sorted(self.skills)]
        return [self.skills[n] for n in sorted(set(names)) if n in self.skills]

    def unknown(self, names: Iterable[str]) -> list[str]:
        return sorted(set(names) - set(self.skills))


def skill_dirs(settings: Settings) -> list[Path]:
    """``$GEODE_HOME/skills``, then each ``[skills] paths`` entry (relative ones to the
    home), without repeats."""
    out: list[Path] = []
    for raw in ("skills", *settings.skills.paths):
        path = Path(os.path.expanduser(raw))
        path = path if path.is_absolute() else settings.home / path
        if path not in out:
            out.append(path)
    return out


def _parsed(folder: Path) -> Skill | SkillError:
    md = folder / SKILL_FILE
    try:
        st = md.stat()
    except OSError as exc:
        return SkillError(md, f"cannot read it ({exc.strerror or exc})")
    key = (st.st_mtime_ns, st.st_size, st.st_ino)
    hit = _PARSED.get(md)
    if hit is not None and hit[0] == key:
        return hit[1]
    try:
        out: Skill | SkillError = parse_skill(folder)
    except SkillError as exc:
        out = exc
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[md] = (key, out)
    return out


def find_skills(dirs: Iterable[Path]) -> SkillScan:
    """Every skill folder (a folder holding SKILL.md) directly inside ``dirs``; a missing
    dir holds none."""
    scan = SkillScan()
    for root in dirs:
        try:
            entries = sorted(os.scandir(root), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            folder = Path(entry.path)
            if not (folder / SKILL_FILE).is_file():
                continue
            found = _parsed(folder)
            if isinstance(found, SkillError):
                scan.problems.append(found)
            elif found.name in scan.skills:
                first = scan.skills[found.name].skill_md
                scan.problems.append(SkillError(found.skill_md, (
                    f"skill {found.name!r} is also in {first}, which is used; rename or "
                    "remove one")))
            else:
                scan.skills[found.name] = found
    return scan
