"""``/memory`` and ``/forget``: what the bot remembers about the person asking and about the
channel, and removing it.

``/memory`` lists the sender's own user memory (where the binding turns memory on) and the
binding's channel memory (where it is ``"channel"``). ``/forget ID`` removes one entry:
the sender's own always; a channel entry only when the sender is one of the binding's
``approvers``. ``/forget all`` removes every entry of the sender's own memory. Each removal
is a timeline row of the thread's session with who caused it. Nobody reaches another
person's user memory here: the owner is the sender the platform reported.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from bots.bindings import spend_scope
from bots.events import InboundEvent
from geode.secret_redaction import redact_text
from geode.store.memory import MemoryAudit, MemoryEntry, MemoryStore

if TYPE_CHECKING:
    from bots.store import ThreadSessions
    from geode.settings import BindingSettings
    from geode.store.database import Database

__all__ = ["ThreadMemory", "memory_command"]

_ID = re.compile(r"m[0-9a-f]{8}")
#: /memory shows at most this many entries of each scope (the rest are counted)
_SHOWN = 50


def _lines(entries: list[MemoryEntry]) -> list[str]:
    shown = [f"  {e.id}  {e.text}" for e in entries[:_SHOWN]]
    if len(entries) > _SHOWN:
        shown.append(f"  … and {len(entries) - _SHOWN} more (geode memory list shows all)")
    return shown or ["  (nothing)"]


async def memory_command(memory: ThreadMemory | None, name: str, event: InboundEvent,
                         binding: BindingSettings) -> str:
    """``/memory`` or ``/forget`` (``memory``: None when the daemon has no store)."""
    if memory is None:
        return "Memory is not available here (no store)."
    if name == "forget":
        return await memory.forget(event, binding)
    return await memory.show(event, binding)


class ThreadMemory:
    """The memory commands of one channel layer."""

    def __init__(self, *, database: Database, threads: ThreadSessions) -> None:
        self.store = MemoryStore(store=database)
        self._threads = threads

    async def show(self, event: InboundEvent, binding: BindingSettings) -> str:
        """``/memory``: the sender's entries and the channel's."""
        if binding.memory == "off":
            return "Memory is off in this channel (the operator sets `memory` in its binding)."
        me = f"{event.platform}:{event.sender}"
        mine = await self.store.list(scope="user", owner=me)
        lines = ["What I remember about you (only you see these, in your threads):",
                 *_lines(mine)]
        if binding.memory == "channel":
            ours = await self.store.list(scope="channel", owner=spend_scope(binding))
            lines += ["What I remember for everyone in this channel:", *_lines(ours)]
        lines.append("/forget ID removes one; /forget all removes everything about you.")
        return "\n".join(lines)

    async def forget(self, event: InboundEvent, binding: BindingSettings) -> str:
        """``/forget ID`` or ``/forget all``."""
        parts = event.text.split()
        arg = parts[1] if len(parts) > 1 else ""
        me = f"{event.platform}:{event.sender}"
        audit = await self._audit(event)
        if arg == "all":
            mine = await self.store.list(scope="user", owner=me)
            gone = await self.store.remove(entry_ids=[e.id for e in mine], scope="user",
                                           owner=me, audit=audit)
            return (f"🧹 Forgot {len(gone)} entr{'y' if len(gone) == 1 else 'ies'} about you."
                    if gone else "I remember nothing about you.")
        if not _ID.fullmatch(arg):
            shown = re.sub(r"[^\w.-]", "?", redact_text(arg)[:24])
            return (f"{shown!r} is not a memory id; /memory shows each entry's id "
                    "(e.g. m3f9a1c2). /forget all removes everything about you."
                    if arg else "Usage: /forget ID (from /memory), or /forget all.")
        entry = await self.store.get(arg)
        if entry is not None and entry.scope == "user" and entry.owner == me:
            await self.store.remove(entry_ids=[arg], scope="user", owner=me, audit=audit)
            return f"🧹 Forgot {arg}."
        here = binding.memory == "channel" and entry is not None and (
            entry.scope == "channel" and entry.owner == spend_scope(binding))
        if not here:
            return f"No memory entry {arg} of yours or of this channel."
        if event.sender not in binding.approvers:
            return "Only this channel's approvers may remove its channel memory."
        await self.store.remove(entry_ids=[arg], scope="channel", owner=spend_scope(binding),
                                audit=audit)
        return f"🧹 Forgot {arg} (channel memory)."

    async def _audit(self, event: InboundEvent) -> MemoryAudit:
        """The removal's record: on the thread's session timeline (a thread without a
        session yet: under its key, as ``/status`` names it), by the sender."""
        state = await self._threads.get(event.thread_key)
        return MemoryAudit(by=f"{event.platform}:{event.sender}",
                           session_id=state.session_id if state is not None
                           else event.thread_key, via="command")
