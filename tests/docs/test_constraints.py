"""constraints.txt pins what CI, the Dockerfile and a production install resolve: every
dependency pyproject.toml names (the core and every extra but `bench`, whose LangGraph baseline CI
never installs) is pinned there, and each pin satisfies pyproject's specifier."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
#: extras CI does not install (benchmark baselines): not pinned
UNPINNED_EXTRAS = {"bench"}


def _pins(text: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"not an exact pin: {raw!r}"
        pins[canonicalize_name(name)] = version.strip()
    return pins


def _requirements(pyproject: dict[str, object]) -> list[Requirement]:
    project = pyproject["project"]
    assert isinstance(project, dict)
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra, deps in project["optional-dependencies"].items():
        if extra not in UNPINNED_EXTRAS:
            reqs += [Requirement(r) for r in deps]
    own = canonicalize_name(project["name"])
    return [r for r in reqs if canonicalize_name(r.name) != own]  # [all] names ourselves


def unsynced(pyproject_text: str, constraints_text: str) -> list[str]:
    """What is out of sync: a dependency with no pin, or a pin outside its specifier."""
    pins = _pins(constraints_text)
    problems = []
    for req in _requirements(tomllib.loads(pyproject_text)):
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{req.name}: not pinned in constraints.txt")
        elif not req.specifier.contains(pin, prereleases=True):
            problems.append(f"{req.name}=={pin} does not satisfy {req.specifier}")
    return problems


def test_every_dependency_of_pyproject_is_pinned_within_its_specifier() -> None:
    problems = unsynced((REPO / "pyproject.toml").read_text(),
                        (REPO / "constraints.txt").read_text())
    assert not problems, "\n".join(problems) + "\n(see constraints.txt's header to refresh it)"


def test_the_check_notices_a_missing_pin_and_a_pin_outside_the_specifier() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    constraints = (REPO / "constraints.txt").read_text()
    without_typer = "\n".join(line for line in constraints.splitlines()
                              if not line.lower().startswith("typer=="))
    assert unsynced(pyproject, without_typer) == ["typer: not pinned in constraints.txt"]
    raised = pyproject.replace('"typer>=0.12"', '"typer>=99"')
    assert unsynced(raised, constraints)[0].startswith("typer==")


def test_ci_and_the_dockerfile_install_with_the_constraints() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'" in ci
    docker = (REPO / "deploy" / "Dockerfile").read_text()
    copied = [w for line in docker.splitlines() if line.startswith("COPY ") for w in line.split()]
    assert "constraints.txt" in copied
    install = next(line for line in docker.splitlines() if "pip install" in line)
    assert "-c constraints.txt" in install, install
