"""Recorded sessions for the replay tests: scenario-like turns run through the real session
factory (HEADLESS and a channel's DAEMON session with an approver) with the scripted model,
each in a workspace of its own, into the store of a GEODE_HOME."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geode.daemon.port_values import SessionOverrides
from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.executor.decisions import ApprovalAnswer, ApprovalRequest
from geode.policy import Mode
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings
from geode.store import open_store
from geode.tools.base import ToolContext, ToolDef
from geode.tools.builtin import builtin_tools, sandbox_available

#: the file tools a recorded HEADLESS run was allowed (``geode run --allow-tool ...``)
FILE_TOOLS = ("write_file", "edit_file")


@dataclass(frozen=True)
class Scenario:
    name: str
    #: per turn: the prompt and the model's script
    turns: Sequence[tuple[str, Sequence[Any]]]
    allow_tools: Sequence[str] = FILE_TOOLS
    mode: Mode = "HEADLESS"
    #: a channel binding's tool lists (DAEMON)
    overrides: SessionOverrides = field(default_factory=SessionOverrides)
    #: files the workspace holds before the session
    seed: Mapping[str, str] = field(default_factory=dict)
    #: tools the recording process had and a replay does not (an MCP server's)
    extra_tools: Sequence[ToolDef] = ()


def _id(scenario: int, n: int) -> str:
    return f"toolu_{scenario}_{n}"


def scenarios() -> list[Scenario]:
    """The kinds of session recorded; ids of tool calls are stable (the comparison's keys)."""
    found = [
        Scenario("notes", [
            ("keep a note", [ToolCall("write_file", {"path": "notes.txt", "content": "alpha\n"},
                                      id="toolu_notes_w"), "saved"]),
            ("what does it say?", [ToolCall("read_file", {"path": "notes.txt"},
                                            id="toolu_notes_r"), "it says alpha"]),
        ]),
        Scenario("edit", [
            ("turn debug on", [ToolCall("edit_file", {"path": "app.ini",
                                                      "old_string": "debug = false",
                                                      "new_string": "debug = true"},
                                        id="toolu_edit_on"), "debug is on"]),
            ("and off again", [ToolCall("edit_file", {"path": "app.ini",
                                                      "old_string": "debug = true",
                                                      "new_string": "debug = false"},
                                        id="toolu_edit_off"), "debug is off"]),
        ], seed={"app.ini": "[app]\ndebug = false\n"}),
        Scenario("batch", [
            ("two at once", [[ToolCall("write_file", {"path": "b.txt", "content": "b"},
                                       id="toolu_batch_w"),
                              ToolCall("read_file", {"path": "missing.txt"},
                                       id="toolu_batch_r")], "one of them failed"]),
        ]),
        Scenario("denied", [
            ("run a command", [ToolCall("run_bash", {"command": "echo hi"},
                                        id="toolu_denied_b"), "I may not run commands"]),
            ("write a file", [ToolCall("write_file", {"path": "e.txt", "content": "e"},
                                       id="toolu_denied_w"),
                              ToolCall("read_file", {}, id="toolu_denied_r"),
                              "neither worked"]),
        ], allow_tools=()),
        Scenario("web", [
            ("fetch the page", [ToolCall("web_fetch", {"url": "https://example.com/"},
                                         id="toolu_web_f"), "the page says hello"]),
        ], allow_tools=("web_fetch",)),
        Scenario("channel", [
            ("write it", [ToolCall("write_file", {"path": "c.txt", "content": "c"},
                                   id="toolu_chan_w"), "written"]),
            ("and again", [ToolCall("write_file", {"path": "d.txt", "content": "d"},
                                    id="toolu_chan_w2"), "refused"]),
        ], allow_tools=(), mode="DAEMON",
            overrides=SessionOverrides(tools=["read_file", "write_file"], approve=("write_file",),
                                       spend_scope="telegram:-100")),
        Scenario("mcp", [
            ("look it up", [ToolCall("docs__lookup", {"topic": "replay"}, id="toolu_mcp_l"),
                            "found it"]),
        ], extra_tools=(DOCS_LOOKUP,)),
    ]
    if sandbox_available():
        found.append(Scenario("bash", [
            ("make out.txt", [ToolCall("run_bash", {"command": "echo hi > out.txt; cat out.txt"},
                                       id="toolu_bash_b"), "printed hi"]),
            ("read it back", [ToolCall("read_file", {"path": "out.txt"}, id="toolu_bash_r"),
                              "it says hi"]),
        ], allow_tools=(*FILE_TOOLS, "run_bash")))
    return found


async def _ann(request: ApprovalRequest) -> ApprovalAnswer:
    """A channel's approver: yes to c.txt, no to the rest."""
    if request.args.get("path") == "c.txt":
        return ApprovalAnswer(answer="allow", by="ann (42)", by_id="42", by_name="ann",
                              outcome="approved", note="approved by ann (42)")
    return ApprovalAnswer(answer="deny", by="ann (42)", by_id="42", by_name="ann",
                          outcome="denied", note="denied by ann (42)")


#: calls of the recorded MCP tool (a replay must answer from the record, never call it)
LOOKUPS: list[str] = []


async def _lookup(ctx: ToolContext, topic: str) -> str:
    LOOKUPS.append(topic)
    return f"docs on {topic}: see replay.md"


#: an MCP server's tool as the session factory sees one (``SERVER__TOOL``, source mcp:SERVER)
DOCS_LOOKUP = ToolDef(name="docs__lookup", description="Look a topic up in the docs.",
                      input_schema={"type": "object", "properties": {"topic": {"type": "string"}},
                                    "required": ["topic"]},
                      handler=_lookup, source="mcp:docs")


async def _page(ctx: ToolContext, **_: Any) -> str:
    return "<p>hello</p> (served by the test, not the internet)"


def recording_tools() -> list[ToolDef]:
    """The built-ins, with a web_fetch that answers locally (tests never reach the world)."""
    return [dataclasses.replace(t, handler=_page) if t.name == "web_fetch" else t
            for t in builtin_tools()]


async def record(home: Path, count: int, *, store_url: str | None = None) -> list[str]:
    """Record ``count`` sessions (the scenarios in turn, unique call ids per copy) in the
    store of ``home`` (or at ``store_url``); returns their ids, oldest first."""
    settings, secrets = load_settings(cwd=home, env={"GEODE_HOME": str(home)})
    store = await open_store(store_url or settings.store_url)
    kinds = scenarios()
    ids = []
    async with Runtime(settings=settings, secrets=secrets, store=store,
                       tools=recording_tools()) as runtime:
        for n in range(count):
            sc = kinds[n % len(kinds)]
            ws = home / f"ws-{n}-{sc.name}"
            ws.mkdir()
            for name, text in sc.seed.items():
                (ws / name).write_text(text, encoding="utf-8")
            script = [[_unique(item, n) for item in turn_script] for _, turn_script in sc.turns]
            model = ScriptedProvider([item for turn in script for item in turn])
            session = await runtime.open_session(SessionContext(
                mode=sc.mode, workspace=ws, provider=model, allow_tools=sc.allow_tools,
                overrides=sc.overrides, approver=_ann, model="scripted",
                extra_tools=sc.extra_tools))
            for prompt, _ in sc.turns:
                await session.run(prompt)
            model.assert_complete()
            ids.append(session.session_id)
        await store.flush_later()
    return ids


def _unique(item: Any, n: int) -> Any:
    if isinstance(item, ToolCall):
        return dataclasses.replace(item, id=f"{item.id}_{n}")
    if isinstance(item, list):
        return [_unique(i, n) for i in item]
    return item
