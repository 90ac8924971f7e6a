"""The entry points of one group, reading only the distributions that declare it.

Light on purpose (the standard library alone): ``geode --help`` reads the plugins' commands
through it, and help imports no logging stack; the hooks, the platforms and the migration
branches use the same scanner (:mod:`geode.hooks.registry` re-exports it).
"""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint, distributions

__all__ = ["entry_points"]


def entry_points(group: str, *, every_copy: bool = False) -> list[EntryPoint]:
    """``importlib.metadata.entry_points(group=group)``, parsing only the distributions whose
    ``entry_points.txt`` mentions ``group`` (the standard call parses every installed one's:
    ~7 ms of each start for a group nobody but a hook plugin declares).

    The same distributions in the same order: each distribution name once, the first found on
    ``sys.path`` (an older copy further down is shadowed, as there). ``every_copy`` reads
    every copy instead: a stale ``*.egg-info`` left in a source checkout on ``sys.path``
    then cannot hide what the installed copy declares.
    """
    found: list[EntryPoint] = []
    seen: set[str] = set()
    for dist in distributions():
        name = getattr(dist, "_normalized_name", None) or _normalize(dist.name)
        if name in seen and not every_copy:
            continue
        seen.add(name)
        text = dist.read_text("entry_points.txt")
        if text and group in text:
            found += dist.entry_points.select(group=group)
    return found


def _normalize(name: str) -> str:
    # importlib.metadata.Prepared.normalize: PEP 503, then "-" -> "_"
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")
