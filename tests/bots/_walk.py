"""Which of our modules a piece of work walks through, counted as ``benchmarks/trace_turn.py``
counts a chat turn's module hops: an edge ``A -> B`` is a function of module ``A`` calling
(or first awaiting) one of ``B``, the caller being the nearest project frame up the stack.
Project modules are files under ``bots/`` and ``geode/`` except the test doubles; a test
module is none, so the work's entry adds no edge."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]
_DOUBLES = ("geode/testing/", "bots/testing/", "geode/providers/scripted.py")


@dataclass
class Walk:
    edges: set[tuple[str, str]] = field(default_factory=set)
    modules: set[str] = field(default_factory=set)


@contextmanager
def module_walk() -> Iterator[Walk]:
    """The walk of what runs in this thread inside the block (a profile hook)."""
    names: dict[str, str | None] = {}

    def module_of(filename: str) -> str | None:
        if filename not in names:
            try:
                rel = Path(filename).resolve().relative_to(_ROOT).as_posix()
            except ValueError:
                rel = ""
            names[filename] = (rel[:-3].replace("/", ".")
                               if rel.startswith(("bots/", "geode/"))
                               and not rel.startswith(_DOUBLES) else None)
        return names[filename]

    walk = Walk()

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        callee = module_of(frame.f_code.co_filename) if event == "call" else None
        if callee is None:
            return
        walk.modules.add(callee)
        up = frame.f_back
        while up is not None:
            caller = module_of(up.f_code.co_filename)
            if caller is not None:
                if caller != callee:
                    walk.edges.add((caller, callee))
                return
            up = up.f_back

    sys.setprofile(hook)
    try:
        yield walk
    finally:
        sys.setprofile(None)
