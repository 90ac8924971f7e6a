"""Issue #30 finding 4: `geode doctor` runs the checks `geode serve` runs at start and says
the same. A binding model serve refused with exit 2 used to pass doctor ("all checks
passed"); a config serve refuses now fails doctor with serve's own words, in text and in
``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_run_command import _env, geode

LOOPBACK = "http://127.0.0.1:9"
TOKENS = {"TELEGRAM_BOT_TOKEN": "123:abc", "GEODE_HEALTH_PORT": "0"}
CHANNEL = f'[channels.telegram]\nbase_url = "{LOOPBACK}/bot"\n'

CASES = {
    "binding model": (CHANNEL + '[[bindings]]\nplatform = "telegram"\nchannel = "-100"\n'
                      'model = "claude-opsu-5-5"\n', TOKENS),
    "binding tool": (CHANNEL + '[[bindings]]\nplatform = "telegram"\nchannel = "-100"\n'
                     'tools = ["read_fle"]\n', TOKENS),
    "channel key": (CHANNEL + "rate_overal_per_s = 5\n", TOKENS),
    "channel token": (CHANNEL, {"TELEGRAM_BOT_TOKEN": "", "GEODE_HEALTH_PORT": "0"}),
}


def _home(tmp_path: Path, config: str) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(config)
    return home


def _serve_errors(err: str) -> list[str]:
    """The lines of serve's ``error: …`` message."""
    assert err.startswith("error: "), err
    return [line for line in err.removeprefix("error: ").splitlines() if line.strip()]


@pytest.mark.parametrize("case", sorted(CASES))
async def test_doctor_fails_with_the_words_serve_refuses_with(tmp_path: Path,
                                                              case: str) -> None:
    config, extra = CASES[case]
    home = _home(tmp_path, config)
    env = _env(home, **extra)
    code, _out, err = await geode("serve", "--demo", env=env, cwd=tmp_path)
    assert code == 2, err
    refused = _serve_errors(err)

    code, out, err = await geode("doctor", "--json", env=env, cwd=tmp_path)
    assert code != 0, out
    report = json.loads(out)
    assert report["ok"] is False
    failed = [c["message"] for c in report["checks"] if c["status"] == "fail"]
    for line in refused:
        assert line in failed, (line, failed)


async def test_doctor_text_names_a_binding_model_serve_refuses(tmp_path: Path) -> None:
    config, extra = CASES["binding model"]
    home = _home(tmp_path, config)
    code, out, _err = await geode("doctor", env=_env(home, **extra), cwd=tmp_path)
    assert code != 0
    assert ("[FAIL] binding telegram -100: Unknown model id 'claude-opsu-5-5'. "
            "Did you mean: claude-opus-5-5") in out
    assert "all checks passed" not in out


async def test_doctor_json_shape(tmp_path: Path) -> None:
    home = _home(tmp_path, CHANNEL + '[[bindings]]\nplatform = "telegram"\nchannel = "-100"\n')
    code, out, _err = await geode("doctor", "--json", env=_env(home, **TOKENS), cwd=tmp_path)
    report = json.loads(out)  # one object, nothing else on stdout
    assert set(report) == {"ok", "checks"}
    assert report["ok"] is (code == 0)
    assert report["ok"] is all(c["status"] != "fail" for c in report["checks"])
    for check in report["checks"]:
        assert set(check) == {"name", "status", "message", "fix"}
        assert check["status"] in {"ok", "warn", "fail"}
    names = {c["name"] for c in report["checks"]}
    assert {"config", "binding telegram -100", "channel telegram", "store"} <= names
    assert any(c["name"] == "channel telegram" and c["status"] == "ok"
               for c in report["checks"])
