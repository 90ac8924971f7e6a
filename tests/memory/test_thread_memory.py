"""The /memory and /forget handlers on a store (SQLite and PostgreSQL), without a platform:
the owner is the event's sender; another person's entry is never shown nor removed; a
channel entry is removed by the binding's approvers only. (Through a Telegram thread:
tests/bots/test_memory_commands.py.)"""

from __future__ import annotations

from bots.events import InboundEvent
from bots.memory_commands import ThreadMemory, memory_command
from bots.store import ThreadSessions
from geode.settings import BindingSettings
from geode.store import Store
from geode.store.memory import MemoryAudit, MemoryStore

BINDING = BindingSettings(platform="telegram", channel="-100", memory="channel",
                          approvers=["42"])


def said(text: str, sender: str = "43") -> InboundEvent:
    return InboundEvent(platform="telegram", workspace="1", channel="-100", thread_root="9",
                        message_id="10", sender=sender, dedupe_key=f"k{text}", text=text)


async def test_memory_and_forget(store: Store) -> None:
    memory = MemoryStore(store=store)
    audit = MemoryAudit(by="telegram:42")
    green = await memory.add(scope="user", owner="telegram:43", text="likes green", audit=audit)
    red = await memory.add(scope="user", owner="telegram:42", text="likes red", audit=audit)
    freeze = await memory.add(scope="channel", owner="telegram:-100", text="freeze in May",
                              audit=audit)
    commands = ThreadMemory(database=store, threads=ThreadSessions(store=store))

    shown = await commands.show(said("/memory"), BINDING)
    assert "likes green" in shown and "freeze in May" in shown and "likes red" not in shown
    off = BINDING.model_copy(update={"memory": "off"})
    assert "Memory is off" in await memory_command(commands, "memory", said("/memory"), off)

    assert "No memory entry" in await commands.forget(said(f"/forget {red.id}"), BINDING)
    assert "approvers" in await commands.forget(said(f"/forget {freeze.id}"), BINDING)
    assert "not a memory id" in await commands.forget(said("/forget ../x"), BINDING)
    assert "Forgot" in await commands.forget(said(f"/forget {green.id}"), BINDING)
    assert "Forgot" in await commands.forget(said(f"/forget {freeze.id}", "42"), BINDING)
    assert [e.id for e in await memory.list()] == [red.id]
    assert "Forgot 1 entry" in await commands.forget(said("/forget all", "42"), BINDING)
    assert await memory.list() == []
    rows = await store.timeline.list(said("x").thread_key)
    assert [(r.kind, r.payload["by"], r.payload["via"]) for r in rows] == [
        ("memory.removed", "telegram:43", "command"), ("memory.removed", "telegram:42", "command"),
        ("memory.removed", "telegram:42", "command")]
    assert await memory_command(None, "memory", said("/memory"), BINDING) == (
        "Memory is not available here (no store).")
