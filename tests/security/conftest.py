"""Fixtures for the boundary tests (issue #16): a workspace next to an "outside" holding a
secret, a GEODE home, a tool caller validating arguments like the executor does, and the
bubblewrap requirement (skipped only outside CI; under CI=true a missing sandbox fails)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from geode.tools.base import ToolContext, ToolDef, ToolDeps, ToolOutput

SECRET = "sk-ant-api03-PLANTEDsecret0123456789abcdefXYZ"


async def _call(tool: ToolDef, ctx: ToolContext, **args: Any) -> ToolOutput:
    jsonschema.validate(args, tool.input_schema)
    return await tool.handler(ctx, **args)


Call = Callable[..., Awaitable[ToolOutput]]


@pytest.fixture
def call() -> Call:
    return _call


@pytest.fixture
def sandbox() -> None:
    from geode.tools.builtin.bash import sandbox_available

    if sandbox_available():
        return
    if os.environ.get("CI") == "true":
        pytest.fail("the bubblewrap sandbox is required under CI=true")
    pytest.skip("the bubblewrap sandbox cannot run here")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(f"OUTSIDE {SECRET}\n")
    return out


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "hello.txt").write_text("hello\n")
    return ws


def make_ctx(workspace: Path, **deps: Any) -> ToolContext:
    return ToolContext(
        session_id="s", turn_id="t", call_id="c", workspace=workspace, mode="repl",
        deps=ToolDeps(**deps),
    )
