"""The README is a front page: short, its first block runs as written on a system Python that
refuses pip outside a venv (PEP 668), and its test command is the one CI runs."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _first_block() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", README, re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= 200


def test_the_first_command_makes_a_venv_before_pip_and_serves_the_demo() -> None:
    install = _first_block()[0]
    steps = [s.strip() for s in install.split("&&")]
    assert steps[0].startswith("python3 -m venv ")
    assert steps[1].startswith(". ") and steps[1].endswith("/bin/activate")
    assert steps[2] == "pip install -e ."
    assert steps[3] == "geode serve --demo"  # the chat-ops service itself, offline


def test_the_test_command_is_the_one_ci_runs() -> None:
    test_command = _first_block()[1]
    ci = (REPO / ".ci" / "run").read_text()
    ran = [line for line in ci.splitlines() if "-m pytest" in line and not line.startswith("#")]
    assert ran == [test_command]


def test_the_readme_links_only_to_files_that_exist() -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not target.startswith(("http://", "https://")):
            assert (REPO / target).exists(), target
