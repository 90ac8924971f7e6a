"""Settings: sources and precedence; a project file cannot make GEODE spawn processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from geode.errors import ConfigError
from geode.secret_redaction import redact_text
from geode.settings import load_settings


def _home(tmp_path: Path, text: str) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(text)
    return home


def test_env_overrides_files_and_project_overrides_home(tmp_path: Path) -> None:
    home = _home(tmp_path, '[model]\ndefault = "gpt-6-sol"\n[loop]\nmax_rounds = 7\n')
    proj = tmp_path / "proj"
    (proj / ".geode").mkdir(parents=True)
    (proj / ".geode" / "config.toml").write_text("[loop]\nmax_rounds = 9\n")
    s, _ = load_settings(cwd=proj, env={"GEODE_HOME": str(home)})
    assert (s.model.default, s.loop.max_rounds) == ("gpt-6-sol", 9)
    s, _ = load_settings(
        cwd=proj, env={"GEODE_HOME": str(home), "GEODE_MODEL": "glm-5.3",
                       "GEODE_LOOP__MAX_ROUNDS": "3"},
    )
    assert (s.model.default, s.loop.max_rounds) == ("glm-5.3", 3)


def test_project_config_cannot_declare_hooks_mcp_channels_or_store(tmp_path: Path) -> None:
    home = _home(tmp_path, "")
    proj = tmp_path / "proj"
    (proj / ".geode").mkdir(parents=True)
    (proj / ".geode" / "config.toml").write_text(
        '[[hooks.PreToolUse]]\ncommand = "touch /tmp/pwned"\n'
        '[mcp.servers.x]\ncommand = "touch"\n'
        '[store]\nurl = "sqlite:////tmp/elsewhere.db"\n'
        '[channels.telegram]\ntoken_env = "X"\n'
    )
    # refused, naming every key (it used to be dropped silently); [mcp] is not among them:
    # a project's MCP servers are read separately and run only after `geode trust`
    with pytest.raises(ConfigError, match=r"may not set channels, hooks, store\.") as info:
        load_settings(cwd=proj, env={"GEODE_HOME": str(home)})
    assert "mcp" not in str(info.value).split("may not set")[1].split(".")[0]


def test_secrets_from_dotenv_are_registered_for_redaction(tmp_path: Path) -> None:
    home = _home(tmp_path, "")
    (home / ".env").write_text("OPENAI_API_KEY=sk-dotenv-value-0123456789abcdef\n")
    _, secrets = load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})
    assert secrets.get("OPENAI_API_KEY") == "sk-dotenv-value-0123456789abcdef"
    assert "sk-dotenv" not in redact_text("key=sk-dotenv-value-0123456789abcdef")


def test_broken_toml_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    home = _home(tmp_path, "[model\n")
    with pytest.raises(ConfigError, match=r"config\.toml"):
        load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})


def test_invalid_value_is_a_config_error(tmp_path: Path) -> None:
    home = _home(tmp_path, '[loop]\nmax_rounds = "many"\n')
    with pytest.raises(ConfigError, match="max_rounds"):
        load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})


def test_given_env_is_read_instead_of_the_process_env_which_is_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import threading

    home = _home(tmp_path, "")
    monkeypatch.setenv("GEODE_LOOP__MAX_ROUNDS", "11")  # the process says 11
    before = dict(os.environ)
    seen: list[str | None] = []
    stop = threading.Event()

    def reader() -> None:  # another thread reading the environment meanwhile
        while not stop.is_set():
            seen.append(os.environ.get("GEODE_LOOP__MAX_ROUNDS"))

    t = threading.Thread(target=reader)
    t.start()
    try:
        for _ in range(20):
            s, _ = load_settings(env={"GEODE_HOME": str(home), "GEODE_LOOP__MAX_ROUNDS": "4"})
            assert s.loop.max_rounds == 4
            s, _ = load_settings(env={"GEODE_HOME": str(home)})
            assert s.loop.max_rounds != 11  # the given env has no such key
    finally:
        stop.set()
        t.join()
    assert dict(os.environ) == before
    assert set(seen) == {"11"}
    s, _ = load_settings(env={**os.environ, "GEODE_HOME": str(home)})
    assert s.loop.max_rounds == 11


def test_store_password_file_completes_the_url_and_is_redacted(tmp_path: Path) -> None:
    secret = tmp_path / "pg_password"
    secret.write_text("s3cret-from-a-file\n")  # the trailing newline is not part of it
    home = _home(tmp_path, '[store]\nurl = "postgresql+psycopg://geode@db:5432/geode"\n'
                           f'password_file = "{secret}"\n')
    s, _ = load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})
    assert s.store_url == "postgresql+psycopg://geode:s3cret-from-a-file@db:5432/geode"
    assert "s3cret-from-a-file" not in redact_text(f"connecting to {s.store_url}")
    secret.unlink()
    with pytest.raises(ConfigError, match="password_file"):
        load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})
