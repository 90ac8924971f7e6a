"""One skill: a folder holding a ``SKILL.md`` (the Agent Skills format, as Claude Code and
Codex read it): YAML front matter with ``name`` and ``description``, then the instructions;
any files beside it (scripts, references, templates).

The front matter is checked here, once, for every reader (the session, ``geode skills
list``, ``geode doctor``): a bad one is a :class:`SkillError` that names the file and what
to fix. Keys other than ``name`` and ``description`` (``license``, ``allowed-tools``, ...)
are kept out of the prompt and grant nothing: a skill's text never widens a session's tools.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from geode.errors import ConfigError

__all__ = ["MAX_DESCRIPTION", "MAX_SKILL_MD_BYTES", "SKILL_FILE", "Skill", "SkillError",
           "parse_skill"]

SKILL_FILE = "SKILL.md"
#: the Agent Skills format's bounds: a name of at most 64 characters, a description of 1024
MAX_NAME = 64
MAX_DESCRIPTION = 1024
#: a SKILL.md larger than this is refused (its instructions go to the model whole)
MAX_SKILL_MD_BYTES = 256 * 1024
#: lowercase letters, digits and single hyphens, not at either end
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.S | re.M)


class SkillError(ConfigError):
    """A skill folder that cannot be offered; the message names its SKILL.md."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True, kw_only=True)
class Skill:
    """A valid skill (its instructions are read when it is opened, not before)."""

    name: str
    description: str
    #: the folder holding SKILL.md
    folder: Path

    @property
    def skill_md(self) -> Path:
        return self.folder / SKILL_FILE

    def instructions(self) -> str:
        """The body of SKILL.md after the front matter (read now: an edit shows at once).

        Raises:
            SkillError: the file went away or became invalid since it was listed.
        """
        _, body = _split(self.skill_md)
        return body


def _read(path: Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SkillError(path, f"cannot read it ({exc.strerror or exc})") from None
    if len(raw) > MAX_SKILL_MD_BYTES:
        raise SkillError(path, f"is {len(raw)} bytes; a SKILL.md may have at most "
                               f"{MAX_SKILL_MD_BYTES} (move details to files beside it)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SkillError(path, "is not UTF-8 text") from None


def _split(path: Path) -> tuple[dict[str, object], str]:
    import yaml

    text = _read(path)
    m = _FRONT.match(text)
    if m is None:
        raise SkillError(path, "has no front matter: it must start with a line '---', then "
                               "'name: ...' and 'description: ...', then a line '---'")
    try:
        meta = yaml.safe_load(m.group(1))
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 2})" if where is not None else ""
        raise SkillError(path, f"its front matter is not valid YAML{line}: "
                               f"{getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(meta, dict):
        raise SkillError(path, "its front matter must be 'key: value' lines (a YAML mapping)")
    return meta, text[m.end():].strip()


def parse_skill(folder: Path) -> Skill:
    """The skill in ``folder`` (which holds a SKILL.md), its front matter checked.

    Raises:
        SkillError: what is wrong, naming the file.
    """
    path = folder / SKILL_FILE
    meta, body = _split(path)
    name = meta.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SkillError(path, "front matter has no 'name' (lowercase letters, digits and "
                               "hyphens, the folder's name)")
    if len(name) > MAX_NAME or not _NAME.match(name):
        raise SkillError(path, f"name {name!r} must be 1-{MAX_NAME} lowercase letters, digits "
                               "and single hyphens (not at either end)")
    if name != folder.name:
        raise SkillError(path, f"name {name!r} differs from its folder's name "
                               f"{folder.name!r}; rename one so they match")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillError(path, "front matter has no 'description' (what the skill does and "
                               "when to use it, one or two sentences)")
    description = " ".join(description.split())
    if len(description) > MAX_DESCRIPTION:
        raise SkillError(path, f"description has {len(description)} characters; at most "
                               f"{MAX_DESCRIPTION}")
    if not body:
        raise SkillError(path, "has no instructions after its front matter")
    return Skill(name=name, description=description, folder=folder)
