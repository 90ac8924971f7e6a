"""Every file the packages read at run time ships in the wheel.

setuptools puts only ``.py`` files of a package into a wheel unless
``[tool.setuptools.package-data]`` names the others; a template or script left out works from a
checkout (``pip install -e``) and breaks in the Docker image. This compares the tree with the
globs, so a new platform's templates cannot be forgotten.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: files in the package folders that are not package data
_NOT_DATA = {".py", ".pyc", ".pyi"}
#: read by `alembic revision` when a developer writes a migration, never at run time
_DEV_ONLY = {"geode/store/migrations/script.py.mako"}


def test_every_non_python_file_of_the_packages_is_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data: dict[str, list[str]] = config["tool"]["setuptools"]["package-data"]
    missing = []
    for package in ("geode", "bots"):
        base = ROOT / package
        for path in base.rglob("*"):
            if not path.is_file() or path.suffix in _NOT_DATA or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(base).as_posix()
            if f"{package}/{rel}" in _DEV_ONLY:
                continue
            if not any(fnmatch.fnmatch(rel, pattern) for pattern in data.get(package, [])):
                missing.append(f"{package}/{rel}")
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"
