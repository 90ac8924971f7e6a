"""From intake to the turn: a short straight path.

The intake records and hands its batch to the pump in the same module; the router runs the
middleware chain, the sender policy and the per-thread processor without leaving its
module; none of them calls back into the layer that composed them, and none asks the
platform per event for a value it was handed (the bot's identity)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bots.telegram import TelegramConnector
from tests.bots.conftest import CHAT, binding, finals, settled

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "trace_turn.py"

#: the modules that accept a message and hand it to the turn
PATH_MODULES = ("bots.connector", "bots.intake", "bots.router", "bots.lease_keeper")


def _edges() -> list[tuple[str, str]]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--json"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    out = "\n" + proc.stdout
    figures = json.loads(out[out.rindex("\n{\n") + 1:])
    edges = []
    for line in figures["edges"]:
        caller, _, rest = line.partition(" -> ")
        edges.append((caller, rest.rpartition(" (")[0]))
    return edges


def test_the_path_from_intake_to_the_turn_is_straight() -> None:
    edges = _edges()
    ours = [(a, b) for a, b in edges if a in PATH_MODULES]
    assert ours, edges
    # composed by the layer, never calling back into it
    assert [(a, b) for a, b in ours if b == "bots.layer"] == []
    # the bot's identity is a value handed at start, not asked of the platform per event
    assert [(a, b) for a, b in ours
            if a in ("bots.intake", "bots.router") and b.startswith("bots.telegram")] == []
    # the chain, the sender policy and the processor are one module: the router calls out
    # only to the records, the binding table and the turn (the thread key is on the event;
    # a text that cannot be a command is not parsed as one)
    router_out = {b for a, b in ours if a == "bots.router"}
    assert router_out <= {"bots.bindings"} | {
        b for b in router_out if b.startswith(("bots.store", "bots.turn."))}, router_out
    # platform code records an event with one call into the intake (no detour through the
    # connector base), and the intake hands its batch to the router; nothing comes back into
    # the intake from the router or the layer
    assert ("bots.telegram.inbound", "bots.intake") in edges, edges
    assert [(a, b) for a, b in edges if (a, b) in {
        ("bots.telegram.inbound", "bots.connector"), ("bots.connector", "bots.intake")}] == []
    assert ("bots.intake", "bots.router") in ours
    assert [(a, b) for a, b in edges
            if b == "bots.intake" and a in ("bots.router", "bots.layer")] == []


async def test_the_identity_is_read_once_and_the_bot_s_own_messages_stay_ignored(
    make_stack: Any, fake: Any, monkeypatch: Any
) -> None:
    asked: list[str] = []
    real = TelegramConnector.bot_user_id

    def counting(self: TelegramConnector) -> str | None:
        asked.append("bot_user_id")
        return real(self)

    monkeypatch.setattr(TelegramConnector, "bot_user_id", counting)
    # the bot's own id is even allowed: only self-ignore keeps it from answering itself
    stack = make_stack(bindings=[binding(allow_users=["42", "123456"])])
    await stack.start()
    at_start = len(asked)
    assert at_start >= 1
    fake.user_says(CHAT, "@geode_bot from myself", from_user=123456)
    for i in range(3):
        fake.user_says(CHAT, f"@geode_bot q{i}", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: q2"), within=10)
    await settled(stack)
    assert finals(fake, "answer to: q0") and finals(fake, "answer to: q1")
    assert not finals(fake, "answer to: from myself")
    assert len(asked) == at_start  # not once per event
