"""`geode skills list` (+ ``--json``) and `geode doctor` validate skills' front matter: a bad
SKILL.md is an error naming the file; a binding naming a skill not installed is a warning;
the search backend's missing key is named with where to set it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.skills.test_skill_folders import write_skill


def _geode(home: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if not k.endswith("_API_KEY") and not k.startswith("GEODE_")}
    base.update(GEODE_HOME=str(home), PYTHONPATH=str(Path(__file__).resolve().parents[2]), **env)
    return subprocess.run([sys.executable, "-m", "geode", *argv], cwd=home, env=base,
                          capture_output=True, text=True, timeout=60, check=False)


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    write_skill(home / "skills", "deploy-notes", description="Write deploy notes.")
    write_skill(tmp_path / "team", "pdf-forms", description="Fill PDF forms.")
    write_skill(tmp_path / "team", "broken", front="name: broken\n")
    (home / "config.toml").write_text(
        f'[skills]\npaths = ["{tmp_path / "team"}"]\n\n'
        '[[bindings]]\nplatform = "telegram"\nchannel = "-100"\nskills = ["pdf-forms", "nope"]\n')
    return home


def test_skills_list_json_names_skills_bindings_and_the_bad_file(tmp_path: Path) -> None:
    home = _home(tmp_path)
    proc = _geode(home, "skills", "list", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # one SKILL.md is invalid
    out = json.loads(proc.stdout)
    assert [(s["name"], s["bindings"]) for s in out["skills"]] == [
        ("deploy-notes", []), ("pdf-forms", ["telegram:-100"])]
    [problem] = out["problems"]
    assert problem["path"] == str(tmp_path / "team" / "broken" / "SKILL.md")
    assert "no 'description'" in problem["message"]
    assert out["unknown_in_bindings"] == ["telegram:-100: nope"]


def test_skills_list_text_and_a_clean_exit(tmp_path: Path) -> None:
    home = _home(tmp_path)
    proc = _geode(home, "skills", "list")
    assert f"error: {tmp_path / 'team' / 'broken' / 'SKILL.md'}: front matter has no" in proc.stderr
    assert "pdf-forms  Fill PDF forms." in proc.stdout and "Traceback" not in proc.stderr
    (tmp_path / "team" / "broken" / "SKILL.md").unlink()
    proc = _geode(home, "skills", "list")
    assert proc.returncode == 0, proc.stderr
    assert "(offered in: telegram:-100)" in proc.stdout


def test_doctor_fails_on_a_bad_skill_and_a_missing_search_key(tmp_path: Path) -> None:
    home = _home(tmp_path)
    with (home / "config.toml").open("a") as f:
        f.write('\n[search]\nprovider = "brave"\n')
    proc = _geode(home, "doctor", ANTHROPIC_API_KEY="sk-ant-api03-doctortest0123456789")
    assert proc.returncode == 1
    assert f"skill {tmp_path / 'team' / 'broken' / 'SKILL.md'}: front matter has no" in proc.stdout
    assert "skills nope are not installed" in proc.stdout
    assert "web search (brave): BRAVE_API_KEY is not set" in proc.stdout
    proc = _geode(home, "doctor", ANTHROPIC_API_KEY="sk-ant-api03-doctortest0123456789",
                  BRAVE_API_KEY="brv-doctor-key-0123456789")
    assert "[ok  ] web search: brave" in proc.stdout
    assert "brv-doctor-key-0123456789" not in proc.stdout + proc.stderr
