"""The tools' typed dependencies (``ctx.deps``): what a session gives them arrives as typed
fields, and a tool whose dependency is missing refuses and says what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from geode.daemon.port import SessionOverrides
from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.loop import TerminationReason
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings
from geode.tools.base import ToolContext, ToolDeps, tool
from geode.tools.builtin import computer, read_result
from geode.tools.deps import SandboxLimits
from geode.tools.errors import ToolFailure


def _ctx(tmp_path: Path, deps: ToolDeps | None = None) -> ToolContext:
    return ToolContext(session_id="s", turn_id="t", call_id="c", workspace=tmp_path,
                       mode="HEADLESS", deps=deps or ToolDeps())


async def test_read_result_without_kept_results_refuses_clearly(tmp_path: Path) -> None:
    with pytest.raises(ToolFailure, match="no results are kept in this session"):
        await read_result.handler(_ctx(tmp_path), result_id="r-1")


async def test_computer_without_a_display_refuses_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    with pytest.raises(ToolFailure, match="computer needs an X display"):
        await computer.handler(_ctx(tmp_path), action="screenshot")


async def test_a_session_gives_its_tools_typed_deps(tmp_path: Path) -> None:
    """Through a real runtime: GEODE's own files, the [sandbox] limits, the session's display
    and its kept results reach a tool as typed fields."""
    seen: list[ToolDeps] = []

    @tool
    async def probe(ctx: ToolContext) -> str:
        """Record what the session gave."""
        seen.append(ctx.deps)
        return "ok"

    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    ws.mkdir()
    (home / "config.toml").write_text("[sandbox]\nmax_processes = 77\n")
    settings, secrets = load_settings(cwd=ws, env={"GEODE_HOME": str(home)})
    async with Runtime(settings=settings, secrets=secrets) as runtime:
        session = await runtime.open_session(SessionContext(
            mode="HEADLESS", workspace=ws, extra_tools=[probe],
            overrides=SessionOverrides(display=":42"),
            provider=ScriptedProvider([ToolCall("probe", {}), "done"])))
        result = await session.run("probe")
    assert result.termination == TerminationReason.NATURAL
    (deps,) = seen
    assert home in deps.protected_paths
    assert deps.sandbox_limits == SandboxLimits(max_processes=77)
    assert deps.display == ":42"
    assert deps.kept_results is not None and deps.result_max_chars
    assert deps.bash_network is False and deps.allow_private_hosts == ()
