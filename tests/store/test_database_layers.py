"""The database knows no record store: each is built from it, never the other way round
(the type cycle engine.py had: Store imported the record stores, they imported Store)."""

from __future__ import annotations

import ast
from pathlib import Path

STORE = Path(__file__).parents[2] / "geode" / "store"
RECORD_STORES = {"sessions", "checkpoint", "timeline", "receipts", "usage", "results",
                 "transcript", "ledger", "stores"}


def _store_imports(module: str) -> set[str]:
    """The geode.store modules ``module`` imports, at any level (TYPE_CHECKING included)."""
    tree = ast.parse((STORE / f"{module}.py").read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["geode", "store"]:
                if len(parts) == 2:
                    found.add("__init__")  # the package: it re-exports every record store
                elif (STORE / f"{parts[2]}.py").exists():
                    found.add(parts[2])
    return found


def _closure(module: str) -> set[str]:
    seen: set[str] = set()
    todo = [module]
    while todo:
        m = todo.pop()
        for dep in _store_imports(m) - seen:
            seen.add(dep)
            if dep != "__init__":
                todo.append(dep)
    return seen


def test_the_database_imports_no_record_store() -> None:
    reached = _closure("database")
    assert not reached & RECORD_STORES, reached & RECORD_STORES
    assert "__init__" not in reached  # the package re-exports them all
    assert {"_engines", "_writer", "schema"} <= reached  # the check has something to see


def test_each_record_store_builds_on_the_database_not_on_the_bundle() -> None:
    for module in RECORD_STORES - {"stores"}:
        assert "stores" not in _closure(module), module
        assert "__init__" not in _store_imports(module), module
    assert {"database", "sessions", "checkpoint"} <= _closure("stores")
