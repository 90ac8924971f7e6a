"""A recorded multi-file read replayed through `geode run` (a subprocess, the real Anthropic SDK
against the loopback fake, a real MCP server answering with the recorded text): the model is
handed exactly the recorded result, all of it; on a small-window model `run --json` says it
was cut and by how much."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from geode.testing.fake_anthropic import FakeAnthropicServer
from tests.cli.test_run_command import _env, geode
from tests.mcp.conftest import ECHO_SERVER


def _recorded_read() -> str:
    """A `read_multiple_files` result like the recorded MCPMark runs': 150 student records,
    about 72,000 characters, the last rows far past the old 50,000-character cut."""
    parts = []
    for i in range(150):
        rows = "\n".join(f"  {subject}: {(i * 7 + k * 13) % 41 + 60}.{k}"
                         for k, subject in enumerate(("math", "physics", "chemistry",
                                                      "history", "literature", "biology")))
        parts.append(f"/data/students/student_{i:03d}.txt:\nname: Student {i:03d}\n"
                     f"id: S2024{i:04d}\nenrolled: 2024-{i % 5 + 4:02d}-{i % 28 + 1:02d}\n"
                     f"grades:\n{rows}\nnotes: {'steady progress; ' * 16}\n")
    return "\n---\n".join(parts)


RECORDED = _recorded_read()


def _mcp(tmp_path: Path) -> Path:
    entry = {"command": sys.executable, "args": [str(ECHO_SERVER)],
             "env": {"RECORDS": RECORDED}, "policy": {"safety": "read_only"}}
    f = tmp_path / "mcp.json"
    f.write_text(json.dumps({"mcpServers": {"fs": entry}}))
    return f


def _tool_result(body: dict[str, object]) -> str:
    messages = body["messages"]
    assert isinstance(messages, list)
    (block,) = [b for b in messages[-1]["content"] if b["type"] == "tool_result"]
    content = block["content"]
    return content if isinstance(content, str) else "".join(c["text"] for c in content)


async def test_the_model_is_handed_exactly_the_recorded_text(tmp_path: Path) -> None:
    assert 70_000 < len(RECORDED) < 80_000
    ws = tmp_path / "ws"
    ws.mkdir()
    async with FakeAnthropicServer() as srv:
        srv.enqueue_tool_calls([("fs__show_env", {"name": "RECORDS"})])
        srv.enqueue_text("150 students")
        env = _env(tmp_path / "home", ANTHROPIC_API_KEY="test-key",
                   ANTHROPIC_BASE_URL=srv.base_url)
        code, out, err = await geode("run", "--json", "--mcp-config", str(_mcp(tmp_path)),
                                     "Summarise the grades", env=env, cwd=ws)
        assert code == 0, err
        result = json.loads(out)
        assert result["tool_calls"] == [{"name": "fs__show_env", "status": "ok"}]
        assert _tool_result(srv.generate_requests[1].body) == RECORDED


async def test_on_a_small_window_model_run_json_says_it_was_cut(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[model.windows]\n"anthropic:claude-small" = 16000\n')
    async with FakeAnthropicServer() as srv:
        srv.enqueue_tool_calls([("fs__show_env", {"name": "RECORDS"})])
        srv.enqueue_text("saw the ends")
        env = _env(home, ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=srv.base_url)
        code, out, err = await geode("run", "--json", "--model", "anthropic:claude-small",
                                     "--mcp-config", str(_mcp(tmp_path)), "Summarise",
                                     env=env, cwd=ws)
        assert code == 0, err
        (call,) = json.loads(out)["tool_calls"]
        cut = call["cut"]
        assert (cut["total_chars"], cut["shown_chars"]) == (len(RECORDED), 16_000)
        seen = _tool_result(srv.generate_requests[1].body)
        assert seen.startswith(RECORDED[:12_800]) and seen.endswith(RECORDED[-3_200:])
        assert (f"[... {len(RECORDED) - 16_000} of {len(RECORDED)} characters cut here "
                f"(characters 12800 to {len(RECORDED) - 3_200}); the whole result is kept as "
                f"{cut['result_id']}") in seen
