"""A computer-use channel end to end (Telegram stack; the daemon's own Xvfb; a small Tk entry
window as the program to drive): a scripted turn clicks into the entry and types; the model
gets every screenshot as an image; the thread gets the screen as photo uploads while the turn
runs and at its end; with ``computer`` in ``approve`` nothing reaches the window until an
approver clicks Approve, and the request comes with the screen and the action in words.
Never skipped under CI=true."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from geode.messages import ImageBlock, ToolResultBlock
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider, ToolCall
from tests._tk_entry import close_entry, open_entry, tk_python
from tests.bots.conftest import CHAT, binding, finals

PNG = b"\x89PNG\r\n\x1a\n"
TEXT = "hello geode"

@pytest.fixture(autouse=True)
def _x_tools() -> None:
    have = all(shutil.which(p) for p in ("Xvfb", "xdotool", "import")) and tk_python()
    if not have:
        if os.environ.get("CI") == "true":
            pytest.fail("Xvfb, xdotool, ImageMagick and python3-tk are required under CI=true")
        pytest.skip("needs Xvfb, xdotool, ImageMagick and python3-tk")


@pytest.fixture
async def tk_entry(tmp_path: Path) -> AsyncIterator[Callable[[str], Any]]:
    """Starts the entry window on a display; its Return writes the text to the yielded
    path (keystrokes, as they arrive, to ``<path>.keys``)."""
    procs: list[subprocess.Popen[bytes]] = []

    async def start(display: str) -> Path:
        proc, out = await asyncio.to_thread(open_entry, tk_python(), display, tmp_path)
        procs.append(proc)
        return out

    yield start
    for p in procs:
        close_entry(p)


def _script() -> list[Any]:
    return [ToolCall("computer", {"action": "click", "x": 200, "y": 50}),
            ToolCall("computer", {"action": "type", "text": TEXT}),
            ToolCall("computer", {"action": "key", "keys": "Return"}),
            "typed it"]


def _screens_seen(requests: list[ModelRequest]) -> int:
    """Screenshots the model got as images in tool results (the last request has them all)."""
    last = requests[-1]
    return sum(isinstance(part, ImageBlock) for m in last.messages for block in m.content
               if isinstance(block, ToolResultBlock) for part in block.content)


async def _read(path: Path, within: float = 15.0) -> str:
    async with asyncio.timeout(within):
        while not (path.exists() and path.read_text()):
            await asyncio.sleep(0.05)
    return path.read_text()


async def _last_line(path: Path, text: str, within: float = 15.0) -> None:
    """Until the window's key log ends with ``text`` (its key events arrive one by one)."""
    async with asyncio.timeout(within):
        while not (path.exists() and path.read_text().splitlines()[-1:] == [text]):
            await asyncio.sleep(0.05)


async def test_a_scripted_turn_clicks_and_types_into_a_window_and_the_thread_watches(
    make_stack, fake, tk_entry
):
    provider = ScriptedProvider(_script())
    stack = make_stack(provider=provider, bindings=[binding(computer_use=True)])
    await stack.start()
    computer = stack.daemon.computer
    assert computer is not None and computer.supervisor is not None  # serve's own Xvfb
    computer.screenshot_every_s = 0.01  # as often as the actions come: still one at a time
    received = await tk_entry(computer.name)

    fake.user_says(CHAT, "@geode_bot type hello geode into the box", from_user=42)
    await fake.wait_until(lambda: finals(fake, "typed it"), within=30)
    assert await _read(received) == TEXT  # clicked into the entry, typed, pressed Return
    provider.assert_complete()
    assert _screens_seen(provider.calls) == 3  # each action's screenshot, as an image
    shots = [u for u in fake.uploads if u.chat_id == CHAT]
    assert shots and all(u.method == "sendPhoto" and u.data.startswith(PNG) for u in shots)
    assert shots[-1].caption == "🖥 The screen at the end of the turn"
    assert len(shots) >= 2  # at least one while it ran, and the one at the end


async def test_with_computer_in_approve_nothing_is_typed_until_the_approval_click(
    make_stack, fake, tk_entry
):
    provider = ScriptedProvider(
        [ToolCall("computer", {"action": "screenshot"}), *_script()])  # a look runs freely
    b = binding(computer_use=True, approve=["computer"], approvers=["43"],
                approve_computer_actions=["type", "key"])
    stack = make_stack(provider=provider, bindings=[b])
    await stack.start()
    computer = stack.daemon.computer
    assert computer is not None
    computer.screenshot_every_s = 0  # only the approvals' screens and the one at the end
    received = await tk_entry(computer.name)
    keys = Path(f"{received}.keys")

    fake.user_says(CHAT, "@geode_bot type hello geode into the box", from_user=42)

    def request() -> Any:
        found = [m for m in fake.messages_in(CHAT, from_bot=True)
                 if "Approval needed" in m.plain_text]
        return found[-1] if found else None

    await fake.wait_until(lambda: request() is not None, within=20)
    first = request()
    assert 'computer: type "hello geode"' in first.plain_text
    # the screen it would act on came with it, just before it
    shot = fake.uploads[-1]
    assert shot.method == "sendPhoto" and shot.data.startswith(PNG)
    assert shot.caption.startswith("🖥 The screen now, for approval ")
    assert 'computer: type "hello geode"' in shot.caption
    assert shot.message_id < first.message_id
    # the click (not in approve_computer_actions) ran; nothing was typed
    assert not keys.exists() and not received.exists()
    assert len(provider.calls) == 3  # screenshot, click, type proposed: waiting since

    fake.user_clicks(CHAT, first.message_id, from_user=43, button="Approve")
    await fake.wait_until(lambda: request() is not None and request().message_id
                          != first.message_id, within=20)  # the Return key asks next
    await _last_line(keys, TEXT)  # typed after the yes, only then
    assert not received.exists()  # Return not pressed: it waits for its own approval
    second = request()
    assert "computer: press the keys Return" in second.plain_text
    fake.user_clicks(CHAT, second.message_id, from_user=43, button="Approve")
    await fake.wait_until(lambda: finals(fake, "typed it"), within=20)
    assert await _read(received) == TEXT
    provider.assert_complete()
