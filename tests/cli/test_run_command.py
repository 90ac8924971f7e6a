"""`geode run` end to end in a subprocess: exit codes, --json, stdin, secrets never logged."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from geode.testing.fake_anthropic import FakeAnthropicServer

PLANTED = "sk-ant-api03-PLANTEDSECRETvalue0123456789abcdef"


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_API_KEY") and not k.startswith("GEODE_")
    }
    # run this checkout's code, whatever `pip install -e` last pointed at
    repo = str(Path(__file__).resolve().parents[2])
    env.update({"GEODE_HOME": str(home), "NO_COLOR": "1", "PYTHONPATH": repo}, **extra)
    return env


async def geode(
    *args: str, env: dict[str, str], cwd: Path, stdin: bytes = b""
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "geode",
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("# Sample project\nhello\n")
    (ws / "main.py").write_text("print('hi')\n")
    return ws


async def test_demo_json_has_the_contract_fields(tmp_path: Path, workspace: Path) -> None:
    code, out, err = await geode(
        "run", "--demo", "--json", "What is here?", env=_env(tmp_path / "home"), cwd=workspace
    )
    assert code == 0, err
    obj = json.loads(out)
    for key in ("session_id", "turn_id", "termination", "text", "rounds", "tool_calls", "usage"):
        assert key in obj
    assert obj["termination"] == "natural"
    assert [c["name"] for c in obj["tool_calls"]] == ["list_dir", "read_file"]
    assert all(c["status"] == "ok" for c in obj["tool_calls"])
    assert set(obj["usage"]) >= {"input_tokens", "output_tokens"}
    assert "Sample project" in obj["text"]
    assert "scripted model" in obj["text"]


async def test_missing_key_is_exit_2_naming_the_variable(tmp_path: Path, workspace: Path) -> None:
    code, _out, err = await geode("run", "hi", env=_env(tmp_path / "home"), cwd=workspace)
    assert code == 2
    assert "ANTHROPIC_API_KEY" in err
    assert "Traceback" not in err


async def test_unknown_model_is_exit_2_with_close_ids(tmp_path: Path, workspace: Path) -> None:
    code, _, err = await geode(
        "run", "--model", "claude-opus-5-6", "hi", env=_env(tmp_path / "home"), cwd=workspace
    )
    assert code == 2
    assert "claude-opus-5-5" in err
    assert "Traceback" not in err


async def test_unknown_session_is_exit_2(tmp_path: Path, workspace: Path) -> None:
    code, _, err = await geode(
        "run", "--demo", "--session", "s-nope", "hi", env=_env(tmp_path / "home"), cwd=workspace
    )
    assert code == 2
    assert "s-nope" in err and "Traceback" not in err


async def test_prompt_from_stdin_and_large(tmp_path: Path, workspace: Path) -> None:
    async with FakeAnthropicServer() as srv:
        srv.enqueue_text("got it")
        big = ("lorem ipsum " * 40_000).encode()  # ~480 kB
        env = _env(tmp_path / "home", ANTHROPIC_API_KEY=PLANTED, ANTHROPIC_BASE_URL=srv.base_url)
        code, out, err = await geode("run", "--json", "-", env=env, cwd=workspace, stdin=big)
        assert code == 0, err
        assert json.loads(out)["text"] == "got it"
        sent = srv.generate_requests[0].body["messages"][0]
        text = sent["content"] if isinstance(sent["content"], str) else sent["content"][0]["text"]
        assert len(text) == len(big)


async def test_real_sdk_run_with_tools_never_logs_secrets(tmp_path: Path, workspace: Path) -> None:
    async with FakeAnthropicServer() as srv:
        srv.enqueue_tool_calls([("read_file", {"path": "README.md"}), ("list_dir", {"path": "."})])
        srv.enqueue_error(429, headers={"retry-after": "0"})
        srv.enqueue_text("done")
        env = _env(
            tmp_path / "home",
            ANTHROPIC_API_KEY=PLANTED,
            ANTHROPIC_BASE_URL=srv.base_url,
            TELEGRAM_BOT_TOKEN="123456789:AAHplantedTelegramTokenValue_0123456",
        )
        code, out, err = await geode(
            "--log-json",
            "--log-level",
            "DEBUG",
            "run",
            "--json",
            "Read the README",
            env=env,
            cwd=workspace,
        )
        assert code == 0, err
        obj = json.loads(out)
        assert [c["status"] for c in obj["tool_calls"]] == ["ok", "ok"]
        assert len(srv.generate_requests) == 3  # 429 retried once
        assert "provider_retry" in err or "retry" in err
        assert PLANTED not in err
        assert "AAHplantedTelegramTokenValue" not in err
        # the ledger and database never hold it either
        for f in (tmp_path / "home").rglob("*"):
            if f.is_file():
                assert PLANTED.encode() not in f.read_bytes(), f


async def test_auth_failure_is_exit_1_and_names_the_variable(
    tmp_path: Path, workspace: Path
) -> None:
    async with FakeAnthropicServer() as srv:
        srv.enqueue_error(401)
        env = _env(tmp_path / "home", ANTHROPIC_API_KEY=PLANTED, ANTHROPIC_BASE_URL=srv.base_url)
        code, out, err = await geode("run", "--json", "hi", env=env, cwd=workspace)
        assert code == 1
        obj = json.loads(out)
        assert obj["termination"] == "model_error"
        assert "ANTHROPIC_API_KEY" in obj["detail"]
        assert len(srv.generate_requests) == 1  # auth never retries
        assert PLANTED not in out + err


async def test_deny_tool_flag_denies_at_runtime(tmp_path: Path, workspace: Path) -> None:
    code, out, err = await geode("run", "--demo", "--json", "--deny-tool", "read_file", "look",
                                 env=_env(tmp_path / "home"), cwd=workspace)
    assert code == 0, err
    calls = json.loads(out)["tool_calls"]
    assert {"name": "read_file", "status": "denied"} in calls


async def test_a_stalled_model_shows_a_waiting_line_then_the_error_once(
    tmp_path: Path, workspace: Path
) -> None:
    """Issue #23 item 3: never silent for long. The notice interval is shortened (the
    default's bound, 5 s, is checked in tests/loop); the test waits for the line itself,
    not for a time."""
    async with FakeAnthropicServer() as srv:
        srv.enqueue_text("too late", delay=3600)
        env = _env(tmp_path / "home", ANTHROPIC_API_KEY=PLANTED, ANTHROPIC_BASE_URL=srv.base_url,
                   GEODE_MODEL__WAITING_NOTICE_S="0.5", GEODE_MODEL__CALL_DEADLINE_S="3")
        code, out, err = await geode("run", "hi", env=env, cwd=workspace)
    assert code == 1
    waiting = [line for line in err.splitlines() if line.startswith("waiting for the model (")]
    assert waiting, err
    assert waiting[0].endswith(", attempt 1/4)")
    # the final error once, on stderr; stdout carries no copy of it
    assert err.count("no answer from the model within 3 s") == 1, err
    assert "no answer from the model" not in out
    assert "Traceback" not in err


async def test_run_prints_its_session_and_continue_picks_this_workspaces_last(
    tmp_path: Path, workspace: Path
) -> None:
    """Issue #23 item 4: the session id on stderr, -c/--continue, a readable sessions list."""
    import re

    env = _env(tmp_path / "home")
    code, out, err = await geode("run", "--demo", "--json", "What is   in\nthis folder?",
                                 env=env, cwd=workspace)
    assert code == 0, err
    first = json.loads(out)["session_id"]
    assert re.fullmatch(r"[0-9a-f]{32}", first)
    assert f"(session {first})" in err

    other = tmp_path / "elsewhere"
    other.mkdir()
    code, out, _ = await geode("run", "--demo", "--json", "hi", env=env, cwd=other)
    elsewhere = json.loads(out)["session_id"]

    code, out, err = await geode("run", "--demo", "--json", "-c", "And again?", env=env,
                                 cwd=workspace)
    assert code == 0, err
    assert json.loads(out)["session_id"] == first  # this workspace's, not the newer one
    code, out, _ = await geode("run", "--demo", "--json", "--continue", "hi", "--cwd",
                               str(other), env=env, cwd=workspace)
    assert json.loads(out)["session_id"] == elsewhere

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    code, _, err = await geode("run", "--demo", "-c", "hi", env=env, cwd=fresh)
    assert code == 2 and "No earlier session in" in err and "Traceback" not in err
    code, _, err = await geode("run", "--demo", "-c", "--session", first, "hi", env=env,
                               cwd=workspace)
    assert code == 2 and "not both" in err

    code, out, err = await geode("sessions", "list", env=env, cwd=workspace)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "UPDATED", "(UTC)", "SOURCE", "STATUS", "MODEL", "TITLE"]
    row = next(line for line in lines if line.startswith(first))
    assert "  cli  " in row
    assert row.endswith("What is in this folder?")  # the first prompt, on one line
    listed = json.loads((await geode("sessions", "list", "--json", env=env, cwd=workspace))[1])
    mine = next(s for s in listed if s["id"] == first)
    assert mine["source"] == "cli" and mine["workspace"] == str(workspace.resolve())
