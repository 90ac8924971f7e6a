"""Today's memory use counts ride the turn's first checkpoint save (no transaction of their
own). The kill -9 / takeover view: a save the thread's fence refuses (another replica took
the thread over) writes no use count, and a count is written exactly once, with the first
save that commits, whatever saves failed before it."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from geode.memory import MemoryRead, MemoryScope
from geode.messages import Message, TextBlock
from geode.store import open_store
from geode.store.memory import MemoryAudit, MemoryStore

AUDIT = MemoryAudit(by="cli", via="cli")


class _Fence:
    """A thread claim another replica may take: ``held`` False, every fenced save aborts."""

    def __init__(self) -> None:
        self.held = True

    def check(self, tx: Any) -> None:
        if not self.held:
            raise RuntimeError("the thread was taken over")


async def test_use_counts_ride_only_a_committed_save_and_count_once(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    scope = MemoryScope(mode="channel", user=f"slack:U{tag}", channel=f"slack:C{tag}")
    async with await open_store(f"sqlite:///{tmp_path / 'geode.db'}") as store:
        memory = MemoryStore(store=store)
        entry = await memory.add(scope="user", owner=scope.user, text="takes tea",
                                 audit=AUDIT)
        session_id = f"s-{tag}"
        await store.sessions.create_if_missing(session_id, mode="DAEMON", model="m",
                                               parent_session_id=None, title="t",
                                               metadata={})
        opened = await MemoryRead(store=memory, scope=scope, budget_tokens=2000).open(
            session_id)
        assert entry.id in opened.shown_at_open
        fence = _Fence()
        cp = store.checkpointer(session_id, fence=fence, riders=[opened.count_use])
        messages = [Message(role="user", content=[TextBlock(text="hi")])]

        fence.held = False  # taken over before the first save: nothing of this turn lands
        with pytest.raises(Exception, match="taken over"):
            await cp.save(messages=messages, state={}, status="active")
        got = await memory.get(entry.id)
        assert got is not None and got.use_count == 0

        fence.held = True  # the next save commits: the count with it, once
        await cp.save(messages=messages, state={}, status="active")
        await cp.save(messages=messages, state={"n": 2}, status="active")
        got = await memory.get(entry.id)
        assert got is not None and got.use_count == 1
