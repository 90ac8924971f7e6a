"""Hook plugins are found as ``importlib.metadata.entry_points(group=...)`` finds them, though
only distributions whose entry_points.txt mentions the group are parsed (issue 17: the full
scan was ~7 ms of every start). Real distributions on a temporary ``sys.path``."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

from geode.hooks import HookRegistry
from geode.hooks import registry as registry_mod


def _dist(root: Path, name: str, version: str, entry_points: str | None) -> None:
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(first, "geode-guard", "2.0",
          "[console_scripts]\nguard = guard_plugin:main\n\n"
          "[geode.hooks]\nguard = guard_plugin:install\n")
    # an older copy further down sys.path: shadowed, its hook is not loaded
    _dist(second, "geode_guard", "1.0", "[geode.hooks]\nold_guard = guard_plugin:old\n")
    # the group's name inside another group's: parsed, but not selected
    _dist(first, "near-miss", "1.0", "[geode.hooks.extra]\nx = guard_plugin:install\n")
    _dist(first, "other", "1.0", "[console_scripts]\nother = other:main\n")
    _dist(first, "bare", "1.0", None)
    _dist(second, "late", "1.0", "[geode.hooks]\nlate = guard_plugin:install\n")
    (first / "guard_plugin.py").write_text(
        "def install(registry):\n"
        "    registry.register('PreToolUse', lambda e: None)\n")
    monkeypatch.setattr(sys, "path", [str(first), str(second), *sys.path])
    monkeypatch.delitem(sys.modules, "guard_plugin", raising=False)
    return first


def test_the_same_entry_points_as_importlib_metadata(plugins: Path) -> None:
    want = list(importlib.metadata.entry_points(group="geode.hooks"))
    got = registry_mod.entry_points("geode.hooks")
    assert got == want
    assert [(ep.name, ep.value) for ep in got][:2] == [
        ("guard", "guard_plugin:install"), ("late", "guard_plugin:install")]


def test_the_found_plugins_register_their_hooks(plugins: Path) -> None:
    reg = HookRegistry()
    assert registry_mod.load_entry_point_hooks(reg)[:2] == ["guard", "late"]
    assert reg.hooks_for("PreToolUse", "x") >= 2


def test_every_copy_reads_a_shadowed_copy_too(plugins: Path) -> None:
    """What the migration branches ask for: a stale copy first on sys.path (an old egg-info
    in a checkout) must not hide what the installed copy further down declares."""
    names = {ep.name for ep in registry_mod.entry_points("geode.hooks", every_copy=True)}
    assert {"guard", "late", "old_guard"} <= names
    assert "old_guard" not in {ep.name for ep in registry_mod.entry_points("geode.hooks")}


def test_the_migration_branches_are_read_from_every_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from geode.store import schema

    stale, installed = tmp_path / "stale", tmp_path / "installed"
    _dist(stale, "geode-agent", "0.1.0", "[console_scripts]\ngeode = geode.cli:main\n")
    _dist(installed, "geode-agent", "0.1.0",
          f"[{schema.ENTRY_POINT_GROUP}]\nbots = bots.store.migrations\n")
    monkeypatch.setattr(sys, "path", [str(stale), str(installed), *sys.path])
    assert ("bots", "bots.store.migrations") in schema._registered()
