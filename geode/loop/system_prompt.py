"""The system prompt, assembled each turn from declared sources.

Sources, in order: the built-in base, the ``GEODE.md`` in ``$GEODE_HOME`` (operator-wide),
the ``GEODE.md`` in the session's workspace (project), then rules added by the entry
point (a binding's system prompt, the mode's note), then the names and descriptions of the
skills the session is offered (only those: a skill's instructions come with the ``skill``
tool), then what the session remembers (``geode.memory``: the speaking user's memory and the
binding's, within its token budget, whole entries only). Only the declared ``## `` sections of
a GEODE.md are used (``SECTIONS``), so a stray file cannot inject arbitrary structure.
The conversation is passed separately, never folded into this text.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SECTIONS", "SystemPromptSources", "build_system_prompt", "read_sections"]

SECTIONS = ("Identity", "Instructions", "Rules", "Project", "Conventions")
_MAX_SECTION_CHARS = 8_000
#: the skill listing's descriptions stop here (a few dozen skills fit whole)
MAX_SKILL_LISTING_CHARS = 8_000
#: parsed GEODE.md files, keyed by path, valid while (mtime_ns, size, inode) are unchanged
_PARSED: OrderedDict[Path, tuple[tuple[int, int, int], dict[str, str]]] = OrderedDict()
_PARSED_MAX = 256

BASE = (
    "You are GEODE, an autonomous agent. The host runs your tool calls after checking each "
    "one; a denied call comes back as an error result that names the check. Do not retry a "
    "denied call unchanged. When the task is done, answer with text only."
)


def read_sections(path: Path) -> dict[str, str]:
    """The declared ``## Section`` bodies of a GEODE.md (missing file: nothing).

    The prompt is rebuilt before every model call, on the event loop: the file is read and
    parsed again only when its stat changes (one ``stat`` per call otherwise).
    """
    try:
        st = os.stat(path)
    except OSError:
        _PARSED.pop(path, None)
        return {}
    key = (st.st_mtime_ns, st.st_size, st.st_ino)
    hit = _PARSED.get(path)
    if hit is not None and hit[0] == key:
        _PARSED.move_to_end(path)
        return dict(hit[1])
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    out = _parse(text)
    _PARSED[path] = (key, out)
    while len(_PARSED) > _PARSED_MAX:
        _PARSED.popitem(last=False)
    return dict(out)


def _parse(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in re.finditer(r"^##\s+(.+?)\s*$(.*?)(?=^##\s|\Z)", text, re.M | re.S):
        title = m.group(1).strip()
        if title in SECTIONS:
            out[title] = m.group(2).strip()[:_MAX_SECTION_CHARS]
    return out


@dataclass(frozen=True, kw_only=True)
class SystemPromptSources:
    home: Path | None = None
    workspace: Path | None = None
    rules: Sequence[str] = field(default_factory=tuple)
    mode: str = "HEADLESS"
    #: (name, description) of each skill the session is offered; their instructions are
    #: not here: the ``skill`` tool opens one when the model needs it
    skills: Sequence[tuple[str, str]] = field(default_factory=tuple)
    #: the ``<memory>`` block now (``geode.memory.SessionMemory.prompt``; None: memory off)
    memory: Callable[[], str] | None = None


def build_system_prompt(src: SystemPromptSources) -> str:
    parts = [BASE, f"Session mode: {src.mode}."]
    for label, root in (("operator", src.home), ("project", src.workspace)):
        if root is None:
            continue
        for title, body in read_sections(root / "GEODE.md").items():
            if body:
                parts.append(f'<{label} section="{title}">\n{body}\n</{label}>')
    parts.extend(r for r in src.rules if r)
    if src.skills:
        parts.append(_skill_listing(src.skills))
    if src.memory is not None:
        parts.append(src.memory())
    return "\n\n".join(parts)


def _skill_listing(skills: Sequence[tuple[str, str]]) -> str:
    """The offered skills, one line each; past :data:`MAX_SKILL_LISTING_CHARS` a skill is
    listed by its name alone (the model can still open it), and the listing says so."""
    lines: list[str] = []
    used = 0
    short = 0
    for name, description in skills:
        line = f"- {name}: {description}"
        if used + len(line) > MAX_SKILL_LISTING_CHARS:
            line = f"- {name}"
            short += 1
        lines.append(line)
        used += len(line) + 1
    note = (f"\n({short} skill(s) listed by name only: the descriptions did not fit; open one "
            "to read it.)" if short else "")
    return ("<skills>\nSkills (name: description). When a task matches one, open it with the "
            "skill tool and follow its instructions.\n" + "\n".join(lines) + f"{note}\n</skills>")
