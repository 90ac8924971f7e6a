"""A session that changed its workspace with write_file, edit_file and run_bash (and made
one web call, an effect no rewind undoes), recorded through the real session factory with
the scripted model; the workspace's exact contents after each turn."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings
from geode.store import open_store
from geode.tools.base import ToolContext, ToolDef
from geode.tools.builtin import builtin_tools

ALLOW = ("write_file", "edit_file", "run_bash", "web_fetch")

#: per turn: the prompt and the model's script
TURNS: list[tuple[str, list[Any]]] = [
    ("set things up", [
        [ToolCall("write_file", {"path": "notes.txt", "content": "alpha\n"}, id="c1w"),
         ToolCall("edit_file", {"path": "app.ini", "old_string": "debug = false",
                                "new_string": "debug = true"}, id="c1e")],
        "set up"]),
    ("build it", [
        ToolCall("run_bash", {"command": "echo built > out.txt; rm seed.txt; "
                              "mkdir -p d/e && printf x > d/e/f.txt; echo beta >> notes.txt; "
                              "chmod 600 app.ini"}, id="c2b"),
        ToolCall("web_fetch", {"url": "https://example.com/"}, id="c2f"),
        "built"]),
    ("polish", [
        [ToolCall("edit_file", {"path": "notes.txt", "old_string": "beta",
                                "new_string": "gamma"}, id="c3e"),
         ToolCall("write_file", {"path": "new/deep/file.txt", "content": "deep"}, id="c3w")],
        "polished"]),
]

SEED = {"app.ini": "[app]\ndebug = false\n", "seed.txt": "seeded\n"}

#: a workspace's contents: relative path -> (bytes or "<dir>", mode)
Tree = dict[str, tuple[bytes | str, int]]


def tree(root: Path) -> Tree:
    out: Tree = {}
    for top, dirs, files in os.walk(root):
        for d in dirs:
            p = Path(top, d)
            out[os.path.relpath(p, root)] = ("<dir>", 0)
        for f in files:
            p = Path(top, f)
            out[os.path.relpath(p, root)] = (p.read_bytes(), p.stat().st_mode & 0o777)
    return out


@dataclass(frozen=True)
class Recorded:
    home: Path
    workspace: Path
    session_id: str
    #: the workspace before the session and after each turn
    trees: list[Tree]
    store_url: str


async def _page(ctx: ToolContext, **_: Any) -> str:
    return "<p>hello</p> (served by the test, not the internet)"


def tools() -> list[ToolDef]:
    return [dataclasses.replace(t, handler=_page) if t.name == "web_fetch" else t
            for t in builtin_tools()]


def env_for(home: Path, store_url: str | None = None) -> dict[str, str]:
    env = {"GEODE_HOME": str(home)}
    if store_url:
        env["GEODE_STORE__URL"] = store_url
    return env


def settings_for(home: Path, store_url: str | None = None) -> Any:
    return load_settings(cwd=home, env=env_for(home, store_url))


async def record(base: Path, turns: Sequence[tuple[str, list[Any]]] = TURNS,
                 *, seed: dict[str, str] | None = None,
                 store_url: str | None = None, config: str = "") -> Recorded:
    home, ws = base / "home", base / "ws"
    home.mkdir()
    ws.mkdir()
    if config:
        (home / "config.toml").write_text(config, encoding="utf-8")
    for name, text in (SEED if seed is None else seed).items():
        (ws / name).write_text(text, encoding="utf-8")
    settings, secrets = settings_for(home, store_url)
    store = await open_store(settings.store_url)
    trees = [tree(ws)]
    model = ScriptedProvider([item for _, script in turns for item in script])
    async with Runtime(settings=settings, secrets=secrets, store=store,
                       tools=tools()) as runtime:
        session = await runtime.open_session(SessionContext(
            mode="HEADLESS", workspace=ws, provider=model, allow_tools=ALLOW,
            model="scripted"))
        for prompt, _ in turns:
            result = await session.run(prompt)
            assert result.ok, result
            trees.append(tree(ws))
        model.assert_complete()
        await store.flush_later()
    return Recorded(home=home, workspace=ws, session_id=session.session_id, trees=trees,
                    store_url=settings.store_url)


async def next_request(rec: Recorded, prompt: str) -> list[str]:
    """Run one more turn on the session; the user and assistant texts of the model's
    request (what the model is told of the conversation)."""
    settings, secrets = settings_for(rec.home, rec.store_url)
    store = await open_store(settings.store_url)
    model = ScriptedProvider(["ok"])
    async with Runtime(settings=settings, secrets=secrets, store=store,
                       tools=tools()) as runtime:
        session = await runtime.open_session(SessionContext(
            mode="HEADLESS", workspace=rec.workspace, provider=model, allow_tools=ALLOW,
            session_id=rec.session_id, model="scripted"))
        result = await session.run(prompt)
        assert result.ok, result
        await store.flush_later()
    return [f"{m.role}:{m.text}" for m in model.calls[0].messages if m.text]
