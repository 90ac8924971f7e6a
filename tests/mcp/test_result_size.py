"""A long MCP result reaches the model whole when it fits the model's share of the window; on a
small-window model it is cut to head + tail with a marker, its whole kept (redacted) for
``read_result``, which pages the missing part back in exactly and only for its own session."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.mcp import MCPServerManager
from geode.messages import ToolResultBlock
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings
from geode.store import open_store
from tests.mcp.conftest import ECHO_SERVER

SMALL = "openai:gpt-small-test"
#: 72,000 characters of records, a numbered line every 100; the server's ``show_env`` returns
#: it exactly (a small call, a large result)
TEXT = "".join(f"{i:06d} " + "r" * 92 + "\n" for i in range(720))
READ = ToolCall("echo__show_env", {"name": "RECORDS"})


def _setup(tmp_path: Path, config: str = "", text: str = TEXT) -> tuple[Any, Any, Path, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(config)
    entry = {"command": sys.executable, "args": [str(ECHO_SERVER)],
             "env": {"ECHO_LOG": str(tmp_path / "calls.jsonl"), "RECORDS": text},
             "policy": {"safety": "read_only"}}
    f = tmp_path / "mcp.json"
    f.write_text(json.dumps({"mcpServers": {"echo": entry}}))
    settings, secrets = load_settings(cwd=ws, env={"GEODE_HOME": str(home)})
    return settings, secrets, ws, f


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Any]:
    s = await open_store(f"sqlite:///{tmp_path / 'geode.db'}")
    try:
        yield s
    finally:
        await s.aclose()


def _last_result(request: ModelRequest) -> ToolResultBlock:
    return request.messages[-1].tool_results[0]


async def test_a_72000_character_mcp_result_reaches_a_200k_model_whole(tmp_path: Path) -> None:
    settings, secrets, ws, f = _setup(tmp_path)
    manager = MCPServerManager.from_settings(settings, secrets, extra_files=[f], project_dir=ws)
    model = ScriptedProvider([READ, "read it all"])
    async with Runtime(settings=settings, secrets=secrets, mcp=manager) as runtime:
        session = await runtime.open_session(
            SessionContext(mode="HEADLESS", workspace=ws, provider=model))
        result = await session.run("read the records")
    assert result.text == "read it all"
    seen = _last_result(model.calls[1])
    assert seen.text_content == TEXT and len(TEXT) == 72_000
    # not cut (kept all the same, so compaction could shorten it later)
    assert seen.kept is not None and seen.kept.shown_chars == seen.kept.total_chars == 72_000


async def test_on_a_small_window_model_it_is_cut_and_read_result_pages_it_back(
    tmp_path: Path, store: Any
) -> None:
    secret = " sk-ant-" + "k" * 40 + " "
    text = TEXT[:30_000] + secret + TEXT[30_000 + len(secret):]
    redacted_len = len(text) - len(secret) + len(" [REDACTED] ")
    settings, secrets, ws, f = _setup(tmp_path, f'[model.windows]\n"{SMALL}" = 16000\n',
                                      text=text)
    manager = MCPServerManager.from_settings(settings, secrets, extra_files=[f], project_dir=ws)
    pages: list[str] = []
    state: dict[str, Any] = {}

    def page(request: ModelRequest) -> Any:
        last = _last_result(request)
        if "result_id" not in state:  # the cut result: read from where the head stops
            m = re.search(r"read_result\(result_id=\"(res-[0-9a-f]+)\", offset=(\d+), "
                          r"length=(\d+)\)", last.text_content)
            assert m is not None, last.text_content[-500:]
            state.update(result_id=m[1], next=int(m[2]), end=int(m[2]) + int(m[3]),
                         cut=last)
        else:
            pages.append(last.text_content)
            state["next"] += len(last.text_content)
        if state["next"] >= state["end"]:
            return "done reading"
        return ToolCall("read_result", {"result_id": state["result_id"],
                                        "offset": state["next"],
                                        "length": state["end"] - state["next"]})

    model = ScriptedProvider([READ] + [page] * 12)
    async with Runtime(settings=settings, secrets=secrets, mcp=manager, store=store) as runtime:
        session = await runtime.open_session(
            SessionContext(mode="HEADLESS", workspace=ws, provider=model, model=SMALL))
        result = await session.run("read the records")
        assert result.text == "done reading"
        cut: ToolResultBlock = state["cut"]
        assert cut.kept is not None
        # 16,000 tokens x 0.25 x 4 chars per token: 16,000 characters pass
        assert cut.kept.shown_chars == 16_000
        assert cut.kept.total_chars == redacted_len
        head = cut.text_content.split("\n[... ", 1)[0]
        tail = cut.text_content.rsplit("...]\n", 1)[1]
        assert len(head) == 12_800 and len(tail) == 3_200
        whole = head + "".join(pages) + tail
        # byte for byte: the missing part, redacted where a secret was (the kept whole is)
        assert whole == text.replace(secret, " [REDACTED] ")
        assert secret not in whole and len(pages) >= 3  # pages of at most 16,000
        kept = await store.results.read(session_id=session.session_id,
                                        result_id=cut.kept.result_id)
        assert kept == whole and secret not in kept
        # the timeline says it was cut, and by how much
        await store.flush_later()
        rows = await store.timeline.list(session.session_id)
        cuts = [r for r in rows if r.kind == "tool.result_cut"]
        assert [(r.payload["total_chars"], r.payload["cut_chars"]) for r in cuts] == [
            (redacted_len, redacted_len - 16_000)]

        # another session cannot read it
        other = ScriptedProvider([
            ToolCall("read_result", {"result_id": cut.kept.result_id, "offset": 0}), "no"])
        s2 = await runtime.open_session(
            SessionContext(mode="HEADLESS", workspace=ws, provider=other, model=SMALL))
        r2 = await s2.run("peek")
    assert r2.tool_calls == [{"name": "read_result", "status": "error"}]
    refused = _last_result(other.calls[1])
    assert "unknown result id" in refused.text_content and "rrrr" not in refused.text_content
