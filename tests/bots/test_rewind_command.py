"""/rewind through real Telegram turns (the fake Bot API, a real daemon and store): the
answer is the plan (turns, files, what cannot be undone) and changes nothing; the person
who asked confirms with /approve (someone else cannot); the thread's files are as before
the rewound turn, the model's next request has no trace of it; where the binding's
``approve`` list names a tool the turns used, one of its approvers must confirm."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from bots.testing.telegram import FakeTelegramServer
from bots.workspaces import binding_workspace
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.tools.builtin import sandbox_available
from tests.bots.conftest import CHAT, Stack, binding, finals, settled

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="run_bash needs bubblewrap")

TOOLS = ["read_file", "write_file", "edit_file"]


def model_for(bash: bool) -> Any:
    """'write it' writes notes.txt; 'change it' edits it and makes b.txt (with run_bash, or
    write_file); the tool results get 'done'; anything else 'ok'."""

    def model(request: ModelRequest) -> object:
        last = request.messages[-1]
        text = last.text or ""
        if last.role != "user" or "(id " not in text:
            return "done"
        if text.endswith("write it"):
            return ToolCall("write_file", {"path": "notes.txt", "content": "one\n"})
        if text.endswith("change it"):
            make = (ToolCall("run_bash", {"command": "echo built > b.txt"}) if bash else
                    ToolCall("write_file", {"path": "b.txt", "content": "built\n"}))
            return [ToolCall("edit_file", {"path": "notes.txt", "old_string": "one",
                                           "new_string": "two"}), make]
        return "ok"

    return model


def _said(fake: FakeTelegramServer, prefix: str) -> list[Any]:
    return [m for m in fake.messages_in(CHAT, from_bot=True) if m.plain_text.startswith(prefix)]


async def _say(stack: Stack, fake: FakeTelegramServer, text: str, *, user: int = 42,
               reply_to: int | None = None, answer: str | None = "") -> None:
    """Say ``text`` and wait for the bot's answer starting with ``answer`` ("" : a turn's
    'done'; None: no answer is due, wait until the message was handled)."""
    turns = len(finals(fake, "done"))
    answers = len(_said(fake, answer)) if answer else 0
    fake.user_says(CHAT, text, from_user=user, reply_to=reply_to)
    if answer == "":
        await fake.wait_until(lambda: len(finals(fake, "done")) > turns, within=20)
    elif answer is not None:
        try:
            await fake.wait_until(lambda: len(_said(fake, answer)) > answers, within=20)
        except TimeoutError:
            said = [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)]
            raise AssertionError(f"no answer {answer!r}; the bot said {said}") from None
    else:
        c = stack.connector
        assert c is not None and c.layer is not None
        inbound = c.layer.inbound
        async with asyncio.timeout(10):
            while fake.pending_updates or any(
                    e.event.text.startswith("/")
                    for e in await inbound.unfinished(c.platform, c.workspace)):
                await asyncio.sleep(0.02)
    await settled(stack, within=20)


def _last_bot(fake: FakeTelegramServer) -> int:
    """The bot's last answer of a turn (a reply to it is in the turn's thread)."""
    answers = [m for m in fake.messages_in(CHAT, from_bot=True)
               if m.plain_text in ("done", "ok")]
    return int(answers[-1].message_id)


async def _two_turns(make_stack: Any, fake: FakeTelegramServer, **kw: Any) -> tuple[Stack, Path]:
    stack = make_stack(provider=ScriptedProvider([model_for(bool(kw.get("approve")))],
                                                 repeat_last=True),
                       bindings=[binding(tools=TOOLS, **kw)])
    await stack.start()
    await _say(stack, fake, "@geode_bot write it")
    ws = binding_workspace(stack.home, stack.bindings[0])
    assert (ws / "notes.txt").read_text() == "one\n"
    if kw.get("approve"):  # run_bash waits for an approver of the binding
        fake.user_says(CHAT, "change it", from_user=42, reply_to=_last_bot(fake))
        await fake.wait_until(lambda: bool(_said(fake, "🔐 Approval needed")), within=20)
        request = _said(fake, "🔐 Approval needed")[0]
        await _say(stack, fake, "/approve", user=43, reply_to=request.message_id)
        await fake.wait_until(lambda: len(finals(fake, "done")) == 2, within=20)
        await settled(stack, within=20)
    else:
        await _say(stack, fake, "change it", reply_to=_last_bot(fake))
    assert (ws / "notes.txt").read_text() == "two\n" and (ws / "b.txt").exists()
    return stack, ws


async def test_rewind_in_a_thread_asks_then_takes_the_turn_back(make_stack, fake) -> None:
    stack, ws = await _two_turns(make_stack, fake)
    await _say(stack, fake, "/rewind", reply_to=_last_bot(fake), answer="⏪ Rewind (")
    [plan] = _said(fake, "⏪ Rewind (")
    text = plan.plain_text
    assert "turn(s) 2 of this thread are taken back" in text
    assert "files put back: b.txt, notes.txt" in text
    assert "Nothing has changed yet" in text
    assert (ws / "notes.txt").read_text() == "two\n"  # nothing moved before the confirmation
    short = re.search(r"Rewind \((\w+)\)", text).group(1)  # type: ignore[union-attr]

    await _say(stack, fake, f"/approve {short}", user=43, answer=None)  # not the asker
    assert not _said(fake, "⏪ Rewound")
    assert (ws / "notes.txt").read_text() == "two\n"

    await _say(stack, fake, "/approve", reply_to=plan.message_id, answer="⏪ Rewound")
    [done] = _said(fake, "⏪ Rewound turn(s) 2")
    assert "Files put back: b.txt, notes.txt" in done.plain_text
    assert (ws / "notes.txt").read_text() == "one\n" and not (ws / "b.txt").exists()

    before = len(stack.provider.calls)
    await _say(stack, fake, "what now?", reply_to=_last_bot(fake), answer="ok")
    request = stack.provider.calls[before]
    said = [m.text or "" for m in request.messages if m.role == "user" and m.text]
    assert any(t.endswith("write it") for t in said) and said[-1].endswith("what now?")
    assert not any("change it" in t for t in said)
    assert not any("two" in (m.text or "") for m in request.messages)


async def test_an_approver_confirms_where_the_binding_gates_the_tools(make_stack, fake) -> None:
    stack, ws = await _two_turns(make_stack, fake, approve=["run_bash"], approvers=["43"])
    await _say(stack, fake, "/rewind 2", reply_to=_last_bot(fake), answer="⏪ Rewind (")
    [plan] = _said(fake, "⏪ Rewind (")
    assert "One of the approvers (43) confirms" in plan.plain_text
    assert "files put back: b.txt, notes.txt" in plan.plain_text
    await _say(stack, fake, "/approve", reply_to=plan.message_id, answer=None)  # 43 decides
    assert not _said(fake, "⏪ Rewound")
    await _say(stack, fake, "/approve", user=43, reply_to=plan.message_id, answer="⏪ Rewound")
    assert _said(fake, "⏪ Rewound turn(s) 1, 2")
    assert sorted(p.name for p in ws.iterdir()) == []
