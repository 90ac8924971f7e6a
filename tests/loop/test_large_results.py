"""Several large tool results in one turn stay within the model's window: each passes whole
while it fits; when together they do not, compaction shortens the oldest first to its head
and result id (read_result pages it back), and the turn completes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.loop import TerminationReason
from geode.loop.compaction import estimate_tokens
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings
from geode.tools.base import ToolContext, tool


@tool
async def dump(ctx: ToolContext, n: int) -> str:
    """A 100,000-character report number n."""
    line = f"report {n}: " + "x" * 88 + "\n"
    return (line * 1_100)[:100_000]


async def _run(tmp_path: Path, script: list[Any], config: str = "") -> tuple[Any, Any]:
    ws = tmp_path / "ws"
    ws.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(config)
    settings, secrets = load_settings(cwd=ws, env={"GEODE_HOME": str(home)})
    model = ScriptedProvider(script)
    async with Runtime(settings=settings, secrets=secrets) as runtime:
        session = await runtime.open_session(SessionContext(
            mode="HEADLESS", workspace=ws, provider=model, extra_tools=[dump]))
        result = await session.run("read the five reports")
    return result, model


async def test_five_100000_character_results_in_one_turn_on_a_200k_model(
    tmp_path: Path,
) -> None:
    result, model = await _run(
        tmp_path, [[ToolCall("dump", {"n": i}) for i in range(5)], "read all five"])
    assert result.termination == TerminationReason.NATURAL
    assert result.text == "read all five"
    seen = model.calls[1].messages[-1].tool_results
    assert [len(r.text_content) for r in seen] == [100_000] * 5  # each whole
    assert all("cut" not in c for c in result.tool_calls)


async def test_when_they_do_not_fit_together_the_oldest_are_shortened_first(
    tmp_path: Path,
) -> None:
    # ten 100,000-character results (about 250,000 tokens) on a 200,000-token model
    script: list[Any] = [[ToolCall("dump", {"n": i}) for i in range(5)],
                         [ToolCall("dump", {"n": i}) for i in range(5, 10)], "done"]
    result, model = await _run(tmp_path, script)
    assert result.termination == TerminationReason.NATURAL
    last = model.calls[2]
    assert estimate_tokens(last.messages, last.system) <= 160_000  # compact_at x window
    results = [r for m in last.messages for r in m.tool_results]
    assert len(results) == 10  # nothing dropped: shortened
    short = [r for r in results if len(r.text_content) < 100_000]
    whole = [r for r in results if len(r.text_content) == 100_000]
    # the oldest went first; each keeps its head and says how to page the rest back in
    assert results[: len(short)] == short and whole == results[len(short):]
    for r in short:
        assert r.kept is not None
        assert r.text_content.startswith(f"report {results.index(r)}: ")
        assert (f'read_result(result_id="{r.kept.result_id}", offset=2000, length=98000)'
                in r.text_content)


async def test_a_provider_context_overflow_shortens_the_oldest_results_and_retries(
    tmp_path: Path,
) -> None:
    from geode.errors import ModelError

    overflow = ModelError("prompt is too long", kind="context_overflow", status_code=400)
    script: list[Any] = [[ToolCall("dump", {"n": i}) for i in range(5)], overflow, "done"]
    result, model = await _run(tmp_path, script)
    assert result.termination == TerminationReason.NATURAL
    results = model.calls[2].messages[-1].tool_results
    lengths = [len(r.text_content) for r in results]
    assert lengths[0] < 3_000 and lengths[-1] == 100_000  # oldest first
    assert all(r.kept is not None for r in results)
