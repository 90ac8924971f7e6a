"""computer: screenshot and input on a real X server (Xvfb) with a Tk window that records
what it receives. Skipped only when Xvfb/xdotool are missing and CI != "true"."""

from __future__ import annotations

import asyncio
import base64
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from geode.messages import ImageBlock, TextBlock
from geode.tools.base import ToolContext, ToolDeps
from geode.tools.builtin import computer
from geode.tools.errors import ToolFailure
from tests._tk_entry import close_entry, open_entry


def _ctx(workspace: Path, display: str | None) -> ToolContext:
    return ToolContext(
        session_id="s",
        turn_id="t",
        call_id="c",
        workspace=workspace,
        mode="repl",
        deps=ToolDeps(display=display or None),
    )


@pytest.fixture
def tk_window(x_display: str, tk_python: str, tmp_path: Path) -> Iterator[Path]:
    """A Tk entry at (0,0) 400x100; Return writes its text to the yielded file."""
    proc, out = open_entry(tk_python, x_display, tmp_path)
    try:
        yield out
    finally:
        close_entry(proc)


async def _wait_for(path: Path) -> str:
    for _ in range(200):
        if path.exists() and path.read_text():
            return path.read_text()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} never written")


async def test_screenshot_is_a_png_of_the_screen(
    call: Any, workspace: Path, x_display: str
) -> None:
    result = await call(computer, _ctx(workspace, x_display), action="screenshot")
    assert isinstance(result, list) and len(result) == 1
    block = result[0]
    assert isinstance(block, ImageBlock) and block.media_type == "image/png"
    png = base64.b64decode(block.data)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # IHDR
    assert (width, height) == (640, 480)


def _said(result: Any) -> str:
    """The words of an action's result, after checking it shows the screen after it."""
    assert isinstance(result, list) and len(result) == 2, result
    words, shot = result
    assert isinstance(words, TextBlock) and isinstance(shot, ImageBlock)
    assert base64.b64decode(shot.data)[:8] == b"\x89PNG\r\n\x1a\n"
    return words.text


async def test_click_type_and_key_reach_the_window(
    call: Any, workspace: Path, x_display: str, tk_window: Path
) -> None:
    ctx = _ctx(workspace, x_display)
    said = _said(await call(computer, ctx, action="click", x=200, y=50))
    assert said == "left-clicked at (200, 50)"
    clicks = await _wait_for(Path(f"{tk_window}.click"))
    assert clicks.splitlines() == ["1 200 50"]
    text = "hello geode -x 42"
    assert _said(await call(computer, ctx, action="type", text=text)) == f"typed {len(text)} chars"
    assert _said(await call(computer, ctx, action="key", keys="Return")) == "pressed Return"
    assert await _wait_for(tk_window) == text


async def test_mouse_move_and_scroll(call: Any, workspace: Path, x_display: str) -> None:
    ctx = _ctx(workspace, x_display)
    moved = _said(await call(computer, ctx, action="mouse_move", x=10, y=20))
    assert moved == "moved the mouse to (10, 20)"
    loc = subprocess.run(
        ["xdotool", "getmouselocation", "--shell"],
        env={"DISPLAY": x_display, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "X=10\nY=20\n" in loc
    out = await call(computer, ctx, action="scroll", x=5, y=5, direction="up", amount=2)
    assert _said(out) == "scrolled up 2 at (5, 5)"


async def test_invalid_requests_refused(call: Any, workspace: Path, x_display: str) -> None:
    ctx = _ctx(workspace, x_display)
    with pytest.raises(ToolFailure, match="needs x and y"):
        await call(computer, ctx, action="click")
    with pytest.raises(ToolFailure, match="not xdotool key names"):
        await call(computer, ctx, action="key", keys="--window 1 Return")
    with pytest.raises(ToolFailure, match="needs text"):
        await call(computer, ctx, action="type")
    with pytest.raises(jsonschema.ValidationError):
        await call(computer, ctx, action="rm -rf")


async def test_no_display_is_a_clear_failure(
    call: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    with pytest.raises(ToolFailure, match="computer needs an X display"):
        await call(computer, _ctx(workspace, None), action="screenshot")


async def test_unreachable_display_reports_the_tool_error(
    call: Any, workspace: Path, x_display: str
) -> None:
    with pytest.raises(ToolFailure, match=r"failed on :4242"):
        await call(computer, _ctx(workspace, ":4242"), action="mouse_move", x=1, y=1)


async def test_missing_xdotool_is_a_clear_failure(
    call: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    with pytest.raises(ToolFailure, match="apt-get install xdotool"):
        await call(computer, _ctx(workspace, ":1"), action="click", x=1, y=1)
    with pytest.raises(ToolFailure, match="apt-get install imagemagick"):
        await call(computer, _ctx(workspace, ":1"), action="screenshot")


def test_safety_and_resource_key(workspace: Path) -> None:
    assert computer.safety == "dangerous"
    assert computer.keys_for({"action": "screenshot"}, _ctx(workspace, ":7")) == ["display::7"]
