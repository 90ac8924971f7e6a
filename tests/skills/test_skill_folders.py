"""Skill folders: the Agent Skills front matter checked (a bad one names its file and what
to fix), the operator's folders scanned, duplicates reported, a binding's pick."""

from __future__ import annotations

from pathlib import Path

import pytest

from geode.settings import load_settings
from geode.skills import SkillError, find_skills, parse_skill, skill_dirs


def write_skill(root: Path, name: str, *, description: str = "Does a thing. Use it for things.",
                body: str = "Step 1: do the thing.", front: str | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    meta = front if front is not None else f"name: {name}\ndescription: {description}\n"
    (folder / "SKILL.md").write_text(f"---\n{meta}---\n\n{body}\n")
    return folder


def test_a_valid_skill_is_name_and_description_until_opened(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "pdf-forms", front=(
        "name: pdf-forms\ndescription: >\n  Fill PDF forms.\n  Use for any PDF form.\n"
        "license: MIT\nallowed-tools: Bash(rm:*)\nmetadata:\n  version: '1'\n"))
    skill = parse_skill(folder)
    assert (skill.name, skill.description) == ("pdf-forms", "Fill PDF forms. Use for any PDF form.")
    assert skill.instructions() == "Step 1: do the thing."


@pytest.mark.parametrize(("front", "problem"), [
    ("description: no name\n", "front matter has no 'name'"),
    ("name: Bad_Name\ndescription: d\n", "must be 1-64 lowercase letters"),
    ("name: other\ndescription: d\n", "differs from its folder's name 'tool'"),
    ("name: tool\n", "front matter has no 'description'"),
    ("name: tool\ndescription: [unclosed\n", "not valid YAML"),
    ("- a list\n", "must be 'key: value' lines"),
    (f"name: tool\ndescription: {'x' * 1100}\n", "at most 1024"),
])
def test_bad_front_matter_names_the_file_and_the_fix(
        tmp_path: Path, front: str, problem: str) -> None:
    folder = write_skill(tmp_path, "tool", front=front)
    with pytest.raises(SkillError) as err:
        parse_skill(folder)
    assert str(err.value).startswith(f"{folder / 'SKILL.md'}: ")
    assert problem in str(err.value)


def test_no_front_matter_and_no_instructions_are_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "SKILL.md").write_text("# Just text\n")
    with pytest.raises(SkillError, match="has no front matter"):
        parse_skill(tmp_path / "plain")
    write_skill(tmp_path, "empty", body="")
    with pytest.raises(SkillError, match="has no instructions"):
        parse_skill(tmp_path / "empty")


def test_scan_reports_problems_and_duplicates_and_picks(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    write_skill(first, "alpha")
    write_skill(first, "beta")
    write_skill(second, "alpha", description="A second alpha.")
    write_skill(second, "broken", front="name: broken\n")
    (second / "not-a-skill").mkdir()
    scan = find_skills([first, second, tmp_path / "missing"])
    assert sorted(scan.skills) == ["alpha", "beta"]
    assert scan.skills["alpha"].folder == first / "alpha"  # the first folder wins
    problems = sorted(str(p) for p in scan.problems)
    assert len(problems) == 2
    assert "is also in" in problems[0] or "is also in" in problems[1]
    assert any("broken" in p and "description" in p for p in problems)
    assert [s.name for s in scan.pick(None)] == ["alpha", "beta"]
    assert [s.name for s in scan.pick(["beta", "gamma"])] == ["beta"]
    assert scan.unknown(["beta", "gamma"]) == ["gamma"]
    assert scan.pick([]) == []


def test_skill_dirs_are_the_home_then_the_configured_paths(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[skills]\npaths = ["team", "/srv/skills"]\n')
    settings, _ = load_settings(env={"GEODE_HOME": str(tmp_path)})
    assert skill_dirs(settings) == [tmp_path / "skills", tmp_path / "team", Path("/srv/skills")]


def test_an_edited_skill_md_is_read_again(tmp_path: Path) -> None:
    write_skill(tmp_path, "alpha", description="First.")
    assert find_skills([tmp_path]).skills["alpha"].description == "First."
    write_skill(tmp_path, "alpha", description="Second, a longer one.")
    assert find_skills([tmp_path]).skills["alpha"].description == "Second, a longer one."


def test_the_prompt_lists_skills_within_a_budget_and_names_every_one() -> None:
    from geode.loop.system_prompt import (
        MAX_SKILL_LISTING_CHARS,
        SystemPromptSources,
        build_system_prompt,
    )

    many = [(f"skill-{i:03d}", "x" * 900) for i in range(40)]
    prompt = build_system_prompt(SystemPromptSources(skills=many))
    listing = prompt[prompt.index("<skills>"):]
    assert all(f"- skill-{i:03d}" in listing for i in range(40))  # every skill named
    assert "- skill-000: " + "x" * 900 in listing  # the first ones whole
    assert "\n- skill-039\n" in listing  # the last by name only
    assert "listed by name only" in listing
    assert len(listing) < MAX_SKILL_LISTING_CHARS + 40 * 20 + 300
