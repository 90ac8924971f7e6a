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
import functools
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


@functools.cache
def _parsed(path: Path, _stamp: tuple[int, int]) -> list[ast.AST]:
    return list(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))


def _nodes(path: Path) -> list[ast.AST]:
    """Every node of ``path``'s syntax tree (parsed once per version of the file)."""
    stat = path.stat()
    return _parsed(path, (stat.st_mtime_ns, stat.st_size))


def _imports(path: Path, module: str) -> Iterator[tuple[str, int]]:
    """Every module name ``path`` imports (absolute, relative resolved), with its line."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _nodes(path):
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


_PLATFORMS = ("bots.telegram", "bots.slack", "bots.discord", "bots.webchat")


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
    for node in _nodes(path):
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


# --- geode/ and bots/ together (#32): ratchets -------------------------------------------
#
# The rules below hold for the harness as for the channel layer. Today's tree still breaks
# some of them, and other changes are removing those offenders one by one; so each rule
# carries an explicit ``KNOWN`` set of today's offenders (module names), and the test
# requires the offenders to be exactly that set:
#
# * a module that breaks a rule and is not in ``KNOWN`` fails ("new offender"): fix it;
# * a module in ``KNOWN`` that no longer breaks the rule fails too ("remove it from
#   KNOWN"): the sets can only shrink, and the file always says where the debt is.
#
# The import graph here follows a name to where it is defined: ``from geode.store import
# Database`` is an edge to ``geode.store.database`` (what ``geode/store/__init__.py``
# re-exports it from), not to the package; so a cycle cannot hide behind a package's
# ``__init__``. Every import counts, as above: module level, in functions, under
# ``TYPE_CHECKING``.

#: the store packages: the only places that import SQLAlchemy
_STORE_PACKAGES = ("geode.store", "bots.store")
#: the fakes (test doubles shipped in the packages) may be long: a fake server is its routes
_MAX_LINES = 800


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in packages)


def _modules_at(root: Path, package: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _reexports(known: dict[str, Path]) -> dict[str, dict[str, str]]:
    """For each package, the names its ``__init__`` imports: name -> where it comes from."""
    out: dict[str, dict[str, str]] = {}
    for module, path in known.items():
        if path.name != "__init__.py":
            continue
        names: dict[str, str] = {}
        for node in _nodes(path):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = module.split(".")[: len(module.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    names[alias.asname or alias.name] = f"{base}.{alias.name}"
        out[module] = names
    return out


def _defining_module(name: str, known: dict[str, Path],
                     reexports: dict[str, dict[str, str]]) -> str | None:
    """The module that defines ``name`` (a module, or ``package.Name`` re-exported by it)."""
    for _ in range(20):  # re-export chains are short; a loop of re-exports stops here
        if name in known:
            return name
        package, _, attr = name.rpartition(".")
        target = reexports.get(package, {}).get(attr)
        if target is None or target == name:
            return _resolve(name, known)
        name = target
    return _resolve(name, known)


def _edges(path: Path, module: str, known: dict[str, Path],
           reexports: dict[str, dict[str, str]]) -> Iterator[tuple[str, int]]:
    """The modules ``module`` depends on (resolved through re-exports), with their line."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _nodes(path):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            target = _defining_module(name, known, reexports)
            # a name defined in the importer's own package's ``__init__`` (or in itself)
            # is not an edge: the package is imported first anyway
            if target is not None and target != module and not module.startswith(f"{target}."):
                yield target, node.lineno


def _deep_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    known = {m: p for package in packages for m, p in _modules_at(root, package).items()}
    reexports = _reexports(known)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        graph[module].update(target for target, _line in _edges(path, module, known, reexports))
    return graph


def _cycle_offenders(root: Path, packages: tuple[str, ...],
                     *, across: bool = False) -> dict[str, str]:
    """The modules in a cycle (with ``across``: only cycles through several packages)."""
    return {module: "in the cycle " + " <-> ".join(component)
            for component in _cycles(_deep_graph(root, packages))
            if not across or len({m.split(".")[0] for m in component}) > 1
            for module in component}


def _geode_cycles(root: Path) -> dict[str, str]:
    return _cycle_offenders(root, ("geode",))


def _bots_cycles(root: Path) -> dict[str, str]:
    return _cycle_offenders(root, ("bots",))


def _geode_bots_cycles(root: Path) -> dict[str, str]:
    """Cycles through both packages (each package's own cycles are the rules above)."""
    return _cycle_offenders(root, ("geode", "bots"), across=True)


def _geode_imports_bots(root: Path) -> dict[str, str]:
    """``geode/`` reaches ``bots/`` only through a registry filled by entry points (read at
    run time, never an import), so the harness installs and imports without the channels."""
    out: dict[str, str] = {}
    for module, path in _modules_at(root, "geode").items():
        lines = sorted({line for name, line in _imports(path, module)
                        if name == "bots" or name.startswith("bots.")})
        if lines:
            out[module] = f"{path.relative_to(root)} imports bots (lines {lines})"
    return out


def _sql_outside_the_stores(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for package in ("geode", "bots"):
        for module, path in _modules_at(root, package).items():
            if _within(module, _STORE_PACKAGES):
                continue
            lines = sorted({line for name, line in _imports(path, module)
                            if name == "sqlalchemy" or name.startswith("sqlalchemy.")})
            if lines:
                out[module] = f"{path.relative_to(root)} imports sqlalchemy (lines {lines})"
    return out


def _long_modules(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for package in ("geode", "bots"):
        for module, path in _modules_at(root, package).items():
            if _is_test_helper(module):
                continue  # the fakes: a wire-level fake server is long by nature
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > _MAX_LINES:
                out[module] = f"{path.relative_to(root)} has {lines} lines (> {_MAX_LINES})"
    return out


# Today's offenders (computed on main at the commit that added these rules; #32 is removing
# most of them). "(#32)" marks an offence the #32 work itself brought in.

#: modules in an import cycle inside ``geode/`` (TYPE_CHECKING imports included)
KNOWN_GEODE_CYCLES: frozenset[str] = frozenset()
#: modules in an import cycle inside ``bots/`` once re-exports are followed (the plain graph
#: of ``test_bots_has_no_import_cycle`` cannot see a cycle through a package's ``__init__``)
KNOWN_BOTS_CYCLES: frozenset[str] = frozenset()
#: modules in a cycle that runs through both ``geode/`` and ``bots/``
KNOWN_GEODE_BOTS_CYCLES: frozenset[str] = frozenset()
#: ``geode/`` modules that import ``bots`` instead of asking a registry (``geode.platforms``,
#: ``geode.plugins``: the chat layer's commands, checks and connectors are its plugin's)
KNOWN_GEODE_IMPORTS_BOTS: frozenset[str] = frozenset()
#: modules outside ``geode/store`` and ``bots/store`` that import SQLAlchemy
KNOWN_SQL_OUTSIDE_THE_STORES: frozenset[str] = frozenset()
#: modules (fakes aside) over 800 lines
KNOWN_LONG_MODULES: frozenset[str] = frozenset()

_RATCHETS = {
    "no import cycle in geode/": (_geode_cycles, KNOWN_GEODE_CYCLES, "KNOWN_GEODE_CYCLES"),
    "no import cycle in bots/ (through re-exports)": (
        _bots_cycles, KNOWN_BOTS_CYCLES, "KNOWN_BOTS_CYCLES"),
    "no import cycle between geode/ and bots/": (
        _geode_bots_cycles, KNOWN_GEODE_BOTS_CYCLES, "KNOWN_GEODE_BOTS_CYCLES"),
    "geode/ imports bots/ only through the registry": (
        _geode_imports_bots, KNOWN_GEODE_IMPORTS_BOTS, "KNOWN_GEODE_IMPORTS_BOTS"),
    "SQLAlchemy only in the store packages": (
        _sql_outside_the_stores, KNOWN_SQL_OUTSIDE_THE_STORES, "KNOWN_SQL_OUTSIDE_THE_STORES"),
    f"no module over {_MAX_LINES} lines outside the fakes": (
        _long_modules, KNOWN_LONG_MODULES, "KNOWN_LONG_MODULES"),
}


def _ratchet_failures(offenders: dict[str, str], known: frozenset[str],
                      known_name: str) -> list[str]:
    new = [f"new offender {m}: {offenders[m]}" for m in sorted(offenders.keys() - known)]
    healed = [f"{m} no longer breaks this rule: remove it from {known_name}"
              for m in sorted(known - offenders.keys())]
    return new + healed


@pytest.mark.parametrize("rule", list(_RATCHETS))
def test_offenders_are_exactly_the_known_ones(rule: str) -> None:
    find, known, known_name = _RATCHETS[rule]
    failures = _ratchet_failures(find(ROOT), known, known_name)
    assert not failures, "\n".join(failures)


def test_the_ratchets_have_teeth(tmp_path: Path) -> None:
    """Each rule finds its offence in a small tree, and the ratchet fails both ways."""
    def write(relative: str, text: str) -> None:
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    write("geode/__init__.py", "")
    write("geode/store/__init__.py", "from geode.store.db import Database\n")
    write("geode/store/db.py", "import sqlalchemy\nfrom geode.store.rows import Row\n")
    # a type-only import back through the package's re-export is still a cycle
    write("geode/store/rows.py", "from typing import TYPE_CHECKING\n"
                                 "if TYPE_CHECKING:\n    from geode.store import Database\n")
    write("geode/cli.py", "def main():\n    from bots.layer import Layer\n")
    write("geode/sched.py", "from sqlalchemy import select\n" + "x = 1\n" * _MAX_LINES)
    write("geode/testing/__init__.py", "x = 1\n" * (_MAX_LINES + 1))
    write("bots/__init__.py", "")
    write("bots/layer.py", "from geode.cli import main\nclass Layer: ...\n")

    assert set(_geode_cycles(tmp_path)) == {"geode.store.db", "geode.store.rows"}
    assert set(_geode_bots_cycles(tmp_path)) == {"geode.cli", "bots.layer"}
    assert set(_geode_imports_bots(tmp_path)) == {"geode.cli"}
    assert set(_sql_outside_the_stores(tmp_path)) == {"geode.sched"}
    assert set(_long_modules(tmp_path)) == {"geode.sched"}  # the fakes may be long

    found = _sql_outside_the_stores(tmp_path)
    assert _ratchet_failures(found, frozenset({"geode.sched"}), "K") == []
    assert _ratchet_failures(found, frozenset(), "K") == [
        f"new offender geode.sched: {found['geode.sched']}"]
    assert _ratchet_failures(found, frozenset({"geode.sched", "geode.cli"}), "K") == [
        "geode.cli no longer breaks this rule: remove it from K"]
