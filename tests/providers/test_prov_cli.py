"""`geode models` shows every seed id with its role and paths; a refused path is exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

SEED = tomllib.loads((Path(__file__).parent / "data" / "seed_models.toml").read_text("utf-8"))


def _geode(home: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if not k.endswith("_API_KEY") and not k.startswith(("GEODE_", "CODEX_"))}
    repo = str(Path(__file__).resolve().parents[2])
    base.update(GEODE_HOME=str(home), PYTHONPATH=repo, CODEX_HOME=str(home / "codex"), **env)
    return subprocess.run([sys.executable, "-m", "geode", *args], cwd=cwd, env=base,
                          capture_output=True, text=True, timeout=60, check=False)


def _seed_ids() -> list[str]:
    return [
        *SEED["anthropic"]["ids"],
        *SEED["openai"]["ids"],
        *SEED["glm"]["ids"],
        *SEED["openrouter"]["selectors"],
        SEED["typesafe_jev"]["direct"],
        SEED["typesafe_jev"]["via_openrouter"],
    ]


def test_models_lists_every_seed_id_with_roles_and_paths(tmp_path: Path) -> None:
    proc = _geode(tmp_path, tmp_path, "models", OPENAI_API_KEY="sk-test-models-0123456789")
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    for mid in _seed_ids():
        assert mid in lines, mid
    assert "primary" in lines["claude-opus-5-5"]
    assert "auxiliary" in lines["claude-sonnet-5"]
    assert "low_cost" in lines["claude-haiku-4-5-20251001"]
    assert "default" in lines["gpt-6-sol"] and "default" in lines["glm-5.3"]
    for mid in SEED["openai"]["codex_subscription"]:
        assert "api (OPENAI_API_KEY: set)" in lines[mid]
        assert "codex (Codex CLI login (`codex login`): missing)" in lines[mid]
    for mid in SEED["openai"]["api_only"]:
        assert "codex" not in lines[mid].split(None, 4)[-1]
    assert "route selector" in lines["openrouter/openrouter/auto"]
    assert "judge only" in lines["jev-1.13.0"] and "TYPESAFE_API_KEY" in lines["jev-1.13.0"]
    assert "refused: anthropic subscription_oauth" in proc.stdout
    assert "refused: glm coding_plan" in proc.stdout


def test_models_json(tmp_path: Path) -> None:
    proc = _geode(tmp_path, tmp_path, "models", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    by_id = {m["id"]: m for m in data["models"]}
    assert list(by_id) == _seed_ids()
    assert by_id["gpt-6-sol"]["paths"]["codex"]["credential_set"] is False
    assert by_id["gpt-5.5"]["paths"] == {
        "api": {"credential": "OPENAI_API_KEY", "credential_set": False}
    }
    assert by_id["claude-opus-5-5"]["context_window"] is None  # unknown, not invented
    assert data["roles"]["auxiliary"] == "claude-sonnet-5"
    assert data["verify_judge"] == "none"


def test_run_on_a_path_the_model_does_not_allow_is_exit_2_naming_the_allowed(
    tmp_path: Path,
) -> None:
    proc = _geode(tmp_path, tmp_path, "run", "--model", "gpt-5.5", "--path", "codex", "hi",
                  OPENAI_API_KEY="sk-test-0123456789")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "'gpt-5.5' is not served on path 'codex'; allowed: api." in proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_with_a_judge_only_model_is_exit_2(tmp_path: Path) -> None:
    proc = _geode(tmp_path, tmp_path, "run", "--model", "jev-1.13.0", "hi",
                  TYPESAFE_API_KEY="ts-test-0123456789")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "judge-only" in proc.stderr


def test_codex_path_without_a_login_is_exit_2_naming_the_login_command(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[model]\ndefault = "gpt-6-sol"\npath = "codex"\n')
    proc = _geode(home, tmp_path, "run", "hi")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Run `codex login`" in proc.stderr


def test_doctor_reports_the_codex_login(tmp_path: Path) -> None:
    import time

    from geode.testing.fake_openai_responses import make_jwt

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[model]\ndefault = "gpt-6-sol"\npath = "codex"\n')
    proc = _geode(home, tmp_path, "doctor")
    assert proc.returncode == 1
    assert "[FAIL] Codex login: none at" in proc.stdout
    assert "run `codex login`" in proc.stdout
    assert "OPENAI_API_KEY is not set" not in proc.stdout  # the login is the credential

    (home / "codex").mkdir()
    (home / "codex" / "auth.json").write_text(json.dumps({"tokens": {
        "access_token": make_jwt(exp=time.time() + 7200), "refresh_token": "r",
        "account_id": "acct"}}))
    proc = _geode(home, tmp_path, "doctor")
    assert "[ok  ] Codex login: login present; access token valid for" in proc.stdout
    assert "Codex login" not in proc.stdout.split("[ok  ] Codex login")[0]


def test_doctor_refuses_a_judge_only_default_model(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[model]\ndefault = "jev-1.13.0"\n')
    proc = _geode(home, tmp_path, "doctor", TYPESAFE_API_KEY="ts-0123456789")
    assert proc.returncode == 1
    assert "[FAIL] default model: Model 'jev-1.13.0' is judge-only" in proc.stdout


def test_schedule_add_refuses_a_judge_only_model(tmp_path: Path) -> None:
    proc = _geode(tmp_path, tmp_path, "schedule", "add", "0 9 * * *", "report",
                  "--model", "typesafe/jev-1.13")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "judge-only" in proc.stderr
