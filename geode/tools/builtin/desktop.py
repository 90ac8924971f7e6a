"""``computer``: see and drive an X display (screenshot, click, type, key, scroll, move).

Input goes through ``xdotool``; screenshots through ImageMagick's ``import``. The display is
``ctx.deps.display`` or, failing that, ``$DISPLAY`` (read in :func:`x_environment`, the
one place this module looks at the environment). Unattended modes enable this tool only by
the operator's explicit per-channel switch; that decision is the executor's, not ours.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import shutil
from typing import Annotated, Any, Literal

from pydantic import Field

from geode.messages import ImageBlock, TextBlock
from geode.tools.base import ToolContext, tool
from geode.tools.errors import ToolFailure

__all__ = ["computer", "display_check", "screenshot_png", "x_environment"]

Action = Literal["screenshot", "click", "type", "key", "scroll", "mouse_move"]
_BUTTONS = {"left": "1", "middle": "2", "right": "3"}
_SCROLL_BUTTONS = {"up": "4", "down": "5", "left": "6", "right": "7"}
#: xdotool key names: keysyms joined by "+" (ctrl+shift+t, Return, KP_Enter, F5)
_KEY_RE = re.compile(r"^[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*$")
_COMMAND_TIMEOUT_S = 30.0
_TYPE_MAX_CHARS = 5_000


def x_environment(ctx: ToolContext) -> dict[str, str]:
    """The environment for X clients: ``DISPLAY`` from ``ctx.deps.display`` or ``$DISPLAY``.

    Also passes ``XAUTHORITY`` and ``PATH`` through; nothing else of the harness's
    environment (API keys) reaches the X tools.

    Raises:
        ToolFailure: no display is configured.
    """
    display = str(ctx.deps.display or os.environ.get("DISPLAY") or "")
    if not display:
        raise ToolFailure(
            "computer needs an X display: none is configured (session setting 'display' "
            "or $DISPLAY); e.g. start `Xvfb :99` and set DISPLAY=:99"
        )
    return _display_env(display)


async def display_check(display: str | None = None) -> tuple[bool, str]:
    """Whether ``computer`` can work on ``display`` (default ``$DISPLAY``; ``geode doctor``):
    xdotool and ImageMagick installed, and the display set and answering. Returns (ok, what
    or why)."""
    missing = [pkg for prog, pkg in (("xdotool", "xdotool"), ("import", "imagemagick"))
               if shutil.which(prog) is None]
    if missing:
        return False, f"missing {', '.join(missing)} (apt-get install {' '.join(missing)})"
    display = os.environ.get("DISPLAY", "") if display is None else display
    if not display:
        return False, "no X display: DISPLAY is not set (e.g. run `Xvfb :99 &`, DISPLAY=:99)"
    try:
        size = await _run([_need("xdotool", "xdotool"), "getdisplaygeometry"],
                          _display_env(display))
    except (ToolFailure, TimeoutError) as exc:
        return False, f"X display {display} does not answer: {exc or 'timeout'}"
    return True, f"X display {display} answers ({size.decode().strip()})"


async def screenshot_png(display: str) -> bytes:
    """The whole screen of ``display`` as PNG bytes (what a channel's watchers see).

    Raises:
        ToolFailure: ImageMagick is missing or the display does not answer.
    """
    blocks = await _screenshot(_display_env(display))
    image = blocks[0]
    assert isinstance(image, ImageBlock)
    return base64.b64decode(image.data)


def _display_env(display: str) -> dict[str, str]:
    env = {"DISPLAY": display, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if xauth := os.environ.get("XAUTHORITY"):
        env["XAUTHORITY"] = xauth
    return env


def _need(program: str, package: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise ToolFailure(f"computer needs {program}: apt-get install {package}")
    return path


async def _run(argv: list[str], env: dict[str, str]) -> bytes:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(_COMMAND_TIMEOUT_S):
            out, err = await proc.communicate()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.shield(proc.wait())
        raise
    if proc.returncode != 0:
        msg = err.decode("utf-8", "replace").strip() or f"exit {proc.returncode}"
        raise ToolFailure(f"{os.path.basename(argv[0])} failed on {env['DISPLAY']}: {msg}")
    return out


def _point(x: int | None, y: int | None, action: str) -> tuple[str, str]:
    if x is None or y is None:
        raise ToolFailure(f"action {action!r} needs x and y")
    return str(x), str(y)


async def _screenshot(env: dict[str, str]) -> list[TextBlock | ImageBlock]:
    importer = _need("import", "imagemagick")
    png = await _run([importer, "-window", "root", "png:-"], env)
    if not png.startswith(b"\x89PNG\r\n\x1a\n"):
        raise ToolFailure("the screenshot is not a PNG image")
    return [ImageBlock(media_type="image/png", data=base64.b64encode(png).decode("ascii"))]


def _display_key(args: dict[str, Any], ctx: ToolContext) -> list[str]:
    # one pointer and keyboard per display: actions on it must not interleave
    try:
        return [f"display:{x_environment(ctx)['DISPLAY']}"]
    except ToolFailure:
        return ["display:none"]


@tool(safety="dangerous", resource_keys=_display_key, deadline_s=60.0)
async def computer(
    ctx: ToolContext,
    action: Annotated[Action, Field(description="What to do")],
    x: Annotated[int | None, Field(ge=0, description="Screen x (click/scroll/move)")] = None,
    y: Annotated[int | None, Field(ge=0, description="Screen y (click/scroll/move)")] = None,
    button: Literal["left", "middle", "right"] = "left",
    text: Annotated[str | None, Field(description="Text to type (type)")] = None,
    keys: Annotated[
        str | None, Field(description="Key combos, space separated: 'ctrl+l Return' (key)")
    ] = None,
    direction: Literal["up", "down", "left", "right"] = "down",
    amount: Annotated[int, Field(ge=1, le=50, description="Scroll clicks")] = 3,
) -> str | list[TextBlock | ImageBlock]:
    """Use the computer's screen: take a screenshot, click, type text, press keys, scroll,
    or move the mouse. Coordinates are screen pixels from the top-left corner. Every action
    answers with a screenshot taken after it."""
    env = x_environment(ctx)
    if action == "screenshot":
        return await _screenshot(env)
    done = await _act(action, env, x=x, y=y, button=button, text=text, keys=keys,
                      direction=direction, amount=amount)
    # Every action shows the model what it did: the screen after it, as an image. The
    # action has happened: a screenshot that fails now is said, never a failed call.
    try:
        return [TextBlock(text=done), *await _screenshot(env)]
    except ToolFailure as exc:
        return f"{done} (no screenshot after it: {exc})"


async def _act(
    action: str, env: dict[str, str], *, x: int | None, y: int | None, button: str,
    text: str | None, keys: str | None, direction: str, amount: int,
) -> str:
    """Run one input action; what was done, in words."""
    xdotool = _need("xdotool", "xdotool")
    if action == "click":
        px, py = _point(x, y, action)
        await _run([xdotool, "mousemove", "--sync", px, py, "click", _BUTTONS[button]], env)
        return f"{button}-clicked at ({px}, {py})"
    if action == "mouse_move":
        px, py = _point(x, y, action)
        await _run([xdotool, "mousemove", "--sync", px, py], env)
        return f"moved the mouse to ({px}, {py})"
    if action == "scroll":
        px, py = _point(x, y, action)
        argv = [xdotool, "mousemove", "--sync", px, py]
        argv += ["click", "--repeat", str(amount), _SCROLL_BUTTONS[direction]]
        await _run(argv, env)
        return f"scrolled {direction} {amount} at ({px}, {py})"
    if action == "type":
        if not text:
            raise ToolFailure("action 'type' needs text")
        if len(text) > _TYPE_MAX_CHARS:
            raise ToolFailure(f"text is longer than {_TYPE_MAX_CHARS} chars; type it in parts")
        # "--": text starting with "-" is typed, not read as an option
        await _run([xdotool, "type", "--delay", "12", "--", text], env)
        return f"typed {len(text)} chars"
    if action == "key":
        combos = (keys or "").split()
        if not combos:
            raise ToolFailure("action 'key' needs keys, e.g. 'Return' or 'ctrl+c'")
        bad = [c for c in combos if not _KEY_RE.match(c)]
        if bad:
            raise ToolFailure(f"not xdotool key names: {bad}; use e.g. 'ctrl+c', 'Return'")
        await _run([xdotool, "key", "--", *combos], env)
        return f"pressed {' '.join(combos)}"
    raise ToolFailure(f"unknown action {action!r}")
