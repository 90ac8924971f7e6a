"""Skills: folders in the Agent Skills format (a ``SKILL.md`` with ``name`` and
``description`` front matter, instructions, files beside it) that the operator installs
in ``$GEODE_HOME/skills`` or ``[skills] paths``.

A session is offered all of them, or the ones its binding names (``skills = [...]``); its
system prompt lists their names and descriptions, and the ``skill`` tool opens one.
"""

from __future__ import annotations

from geode.skills._library import SkillScan, find_skills, skill_dirs
from geode.skills._offer import SKILLS_DIR, OfferedSkills, SkillOpenError
from geode.skills._skill import SKILL_FILE, Skill, SkillError, parse_skill
from geode.skills._tool import skill

__all__ = [
    "SKILLS_DIR",
    "SKILL_FILE",
    "OfferedSkills",
    "Skill",
    "SkillError",
    "SkillOpenError",
    "SkillScan",
    "find_skills",
    "parse_skill",
    "skill",
    "skill_dirs",
]
