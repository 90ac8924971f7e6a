"""Issue #23 item 5: wrong input is refused at the door: exit 2, the message names the
input and its close matches, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from geode.testing.fake_anthropic import FakeAnthropicServer
from geode.testing.fake_openai import FakeOpenAIServer
from tests.cli.test_run_command import _env, geode


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "--demo", "--cwd", "/nonexistent/dir", "hi"], "no such directory"),
        (["run", "--demo", "--deny-tool", "read_fle", "hi"], "Did you mean: read_file"),
        (["run", "--demo", "--allow-tool", "github__create_issue", "hi"],
         "unknown tool 'github__create_issue'"),
        (["--log-level", "INFOO", "models"], "Did you mean INFO?"),
        (["schedule", "add", "0 9 * * *", "report", "--model", "gpt-6-sl"],
         "Did you mean: gpt-6-sol"),
        (["bindings", "add", "telegram", "-100123", "--tool", "read_fle"],
         "Did you mean: read_file"),
        (["bindings", "add", "telegram", "-100123", "--model", "claude-opsu-5-5"],
         "Did you mean: claude-opus-5-5"),
        (["trust", "/nonexistent/project"], "no such directory"),
    ],
)
async def test_wrong_input_is_exit_2_with_close_matches(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    code, out, err = await geode(*args, env=_env(tmp_path / "home"), cwd=tmp_path)
    assert code == 2, out + err
    assert expected in err
    assert "Traceback" not in err


async def test_a_misspelt_config_section_is_exit_2(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[modle]\ndefault = "gpt-6-sol"\n')
    code, _out, err = await geode("run", "--demo", "hi", env=_env(home), cwd=tmp_path)
    assert code == 2
    assert "unknown section or key 'modle'. Did you mean [model]?" in err


async def test_repl_model_switch_is_honoured_and_an_unknown_id_refused(tmp_path: Path) -> None:
    """Item 8 with item 5: /model ID moves the session to that model's endpoint; a typo is
    refused with the close matches and the session keeps its model."""
    async with FakeAnthropicServer() as claude, FakeOpenAIServer() as gpt:
        claude.enqueue_text("from claude")
        gpt.enqueue_text("from gpt")
        env = _env(tmp_path / "home", ANTHROPIC_API_KEY="sk-ant-test",
                   ANTHROPIC_BASE_URL=claude.base_url, OPENAI_API_KEY="sk-test",
                   OPENAI_BASE_URL=gpt.base_url)
        code, out, err = await geode(
            "repl", "--cwd", str(tmp_path),
            env=env, cwd=tmp_path,
            stdin=b"hi\n/model gpt-6-sl\n/model openai:fake-model\nagain\n/status\n/exit\n",
        )
        assert code == 0, err
        assert "Unknown model id 'gpt-6-sl'. Did you mean: gpt-6-sol" in err
        assert "from claude" in out and "from gpt" in out
        assert len(claude.generate_requests) == 1 and len(gpt.generate_requests) == 1
        # the session went on: the second model saw the first exchange
        assert len(gpt.generate_requests[0].body["messages"]) >= 3
        assert "model fake-model" in err  # /status
