"""The folders tell the architecture, and the suite keeps them honest:

* no import cycle among the modules of ``bots/`` (every import counts: module level,
  inside functions, under ``TYPE_CHECKING``; a cycle held together by a late import is
  still a cycle);
* SQLAlchemy is imported in ``bots/`` only by ``bots/store/`` (connectors and the layer
  ask the store by name for a unit of work);
* production code (``geode/``, ``bots/``) never imports test helpers: ``tests``,
  ``geode.testing`` (outside itself) or a ``testing`` module of ``bots``;
* the layer side of ``bots/`` (everything but the connector base, the platform folders and
  the fakes) never imports a connector: it holds the platform only as the
  :class:`bots.port.PlatformClient` port it is given, never the connector that built it;
* events are typed values end to end: outside ``geode.hooks`` (which also serves name-based
  observers: shell hooks, plugins) and the test helpers, nothing emits an event by name
  (``.emit(...)``) or subscribes to names (``.subscribe(...)``); observers ``match`` on
  the event classes (``subscribe_loop`` / ``subscribe_events``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _modules(package: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(path: Path, module: str) -> Iterator[tuple[str, int]]:
    """Every module name ``path`` imports (absolute, relative resolved), with its line."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base, node.lineno
            for alias in node.names:  # ``from pkg import module`` imports the module too
                yield f"{base}.{alias.name}", node.lineno


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def _graph(package: str) -> dict[str, set[str]]:
    known = _modules(package)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        for name, _line in _imports(path, module):
            target = _resolve(name, known)
            # a module importing its own package's __init__ (or itself) is not an edge
            if target is not None and target != module and not module.startswith(f"{target}."):
                graph[module].add(target)
    return graph


def test_bots_has_no_import_cycle() -> None:
    assert _cycles(_graph("bots")) == []


def test_the_cycle_check_has_teeth() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_only_bots_store_imports_sqlalchemy() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for module, path in _modules("bots").items()
        if not (module == "bots.store" or module.startswith("bots.store."))
        for name, line in _imports(path, module)
        if name == "sqlalchemy" or name.startswith("sqlalchemy.")
    ]
    assert offenders == []


def _is_test_helper(name: str) -> bool:
    parts = name.split(".")
    return (
        parts[0] == "tests"
        or name == "geode.testing" or name.startswith("geode.testing.")
        or (parts[0] == "bots" and "testing" in parts)
    )


@pytest.mark.parametrize("package", ["geode", "bots"])
def test_production_code_never_imports_test_helpers(package: str) -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for module, path in _modules(package).items()
        if not _is_test_helper(module)  # the helpers may import each other
        for name, line in _imports(path, module)
        if _is_test_helper(name)
    ]
    assert offenders == []


_PLATFORMS = ("bots.telegram", "bots.slack", "bots.discord")


def _connector_side(module: str) -> bool:
    return (
        module in ("bots", "bots.connector")
        or any(module == p or module.startswith(f"{p}.") for p in _PLATFORMS)
        or _is_test_helper(module)
    )


def test_the_layer_side_never_imports_a_connector() -> None:
    known = _modules("bots")
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for module, path in known.items()
        if not _connector_side(module)
        for name, line in _imports(path, module)
        if (target := _resolve(name, known)) is not None and _connector_side(target)
        and not _is_test_helper(target)
    ]
    assert offenders == []


def _named_event_calls(path: Path) -> Iterator[tuple[str, int]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("emit", "subscribe")):
            yield node.func.attr, node.lineno


@pytest.mark.parametrize("package", ["geode", "bots"])
def test_events_are_emitted_and_observed_by_type_never_by_name(package: str) -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line} .{attr}(...)"
        for module, path in _modules(package).items()
        if not (module == "geode.hooks" or module.startswith("geode.hooks."))
        and not _is_test_helper(module)
        for attr, line in _named_event_calls(path)
    ]
    assert offenders == []



def _platform_mentions(root: Path, names: list[str]) -> list[str]:
    """``path:line`` of every line of a module under ``root`` that names a platform
    (case-insensitive), the test doubles in ``testing/`` aside."""
    import re

    pattern = re.compile("|".join(re.escape(n) for n in names), re.IGNORECASE)
    return [f"{path.relative_to(root)}:{no}"
            for path in sorted(root.rglob("*.py"))
            if "testing" not in path.relative_to(root).parts
            for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if pattern.search(line)]


def test_geode_names_no_platform(tmp_path: Path) -> None:
    # the platforms are a registry (bots.platforms, the geode.platforms entry points): the
    # harness iterates it, so a new platform is its folder plus one registration line
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = sorted(project["entry-points"]["geode.platforms"])
    assert {"telegram", "slack", "discord"} <= set(names)
    assert _platform_mentions(ROOT / "geode", names) == []
    # with teeth: a line naming one is found, in any case; a fake in testing/ may
    (tmp_path / "testing").mkdir()
    (tmp_path / "testing" / "fake.py").write_text("# a fake Telegram server\n")
    (tmp_path / "m.py").write_text("x = 1\n# the SLACK token\n")
    assert _platform_mentions(tmp_path, names) == ["m.py:2"]
