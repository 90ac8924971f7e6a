"""What a turn with memory on costs, kept small without missing a write (SQLite and
PostgreSQL): the block is rendered again only when the rows' content changed, every write
(from this process, another replica or the CLI) is seen at the next turn, a block that left
entries out is not reused, and the use count's UPDATE counts each shown entry once whatever
their number."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from geode.memory import MemoryScope, SessionMemory
from geode.memory import _session as session_module
from geode.store import open_store
from geode.store.memory import MemoryAudit, MemoryStore

AUDIT = MemoryAudit(by="cli", via="cli")


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times a block was rendered (each call of render_memory)."""
    calls: list[int] = []
    real = session_module.render_memory

    def counted(**kw: Any) -> Any:
        calls.append(1)
        return real(**kw)

    monkeypatch.setattr(session_module, "render_memory", counted)
    yield calls


def _scope() -> MemoryScope:
    tag = uuid.uuid4().hex[:8]  # the PostgreSQL variant shares its database across tests
    return MemoryScope(mode="channel", user=f"telegram:{tag}", channel=f"telegram:-{tag}")


async def _open(memory: MemoryStore, scope: MemoryScope, budget: int = 2000) -> SessionMemory:
    return await SessionMemory.open(store=memory, scope=scope, session_id="s",
                                    budget_tokens=budget)


async def test_an_unchanged_block_is_not_rendered_again_and_every_write_is_seen(
        store_url: str, renders: list[int]) -> None:
    scope = _scope()
    async with await open_store(store_url) as here, await open_store(store_url) as there:
        mine, theirs = MemoryStore(store=here), MemoryStore(store=there)  # two replicas
        tea = await mine.add(scope="user", owner=scope.user, text="takes tea", audit=AUDIT)
        await mine.add(scope="channel", owner=scope.channel, text="deploys on Tuesdays",
                       audit=AUDIT)
        first = (await _open(mine, scope)).prompt()
        assert "takes tea" in first and "deploys on Tuesdays" in first
        for _ in range(3):  # the same rows: the same block, not rendered again
            assert (await _open(mine, scope)).prompt() == first
        assert len(renders) == 1

        # each kind of write by the other replica is in this one's next block
        await theirs.add(scope="channel", owner=scope.channel, text="standup 09:30",
                         audit=AUDIT)
        assert "standup 09:30" in (await _open(mine, scope)).prompt()
        await theirs.replace(entry_id=tea.id, scope="user", owner=scope.user,
                             text="takes green tea", audit=AUDIT)
        block = (await _open(mine, scope)).prompt()
        assert "takes green tea" in block and "- [" + tea.id + "] takes tea" not in block
        await theirs.remove(entry_ids=[tea.id], audit=AUDIT)
        assert "green tea" not in (await _open(mine, scope)).prompt()
        assert len(renders) == 4

        # a block for another person is their own, never this one's
        other = MemoryScope(mode="channel", user=scope.user + "x", channel=scope.channel)
        assert "(nothing saved)" in (await _open(mine, other)).prompt()


async def test_a_block_that_left_entries_out_is_rendered_every_time(
        store_url: str, renders: list[int]) -> None:
    scope = _scope()
    async with await open_store(store_url) as store:
        memory = MemoryStore(store=store)
        for i in range(12):
            await memory.add(scope="user", owner=scope.user, text=f"fact {i} " + "x" * 400,
                             audit=AUDIT)
        for _ in range(3):  # which entries fit depends on their use, which each turn changes
            opened = await _open(memory, scope, budget=600)
            await store.flush_later()
            assert opened.rendered().left_out > 0
        assert len(renders) == 3


@pytest.mark.parametrize("shown", [1, 3, 12, 33])
async def test_each_shown_entry_is_counted_once(store_url: str, shown: int) -> None:
    scope = _scope()
    async with await open_store(store_url) as store:
        memory = MemoryStore(store=store)
        for i in range(shown):
            await memory.add(scope="user", owner=scope.user, text=f"fact {i}", audit=AUDIT)
        await memory.add(scope="user", owner=scope.user + "x", text="not shown", audit=AUDIT)
        for _ in range(2):
            await _open(memory, scope, budget=8000)
        await store.flush_later()
        counts = {e.text: e.use_count for e in await memory.list()
                  if e.owner.startswith(scope.user)}
        assert counts == {**{f"fact {i}": 2 for i in range(shown)}, "not shown": 0}


async def test_a_reused_block_makes_no_entries_until_the_turn_writes(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn whose block is reused needs no entry objects: they are made from the rows the
    turn read only when a write changes the block (which then still shows every entry)."""
    from geode.store.memory import MemoryEntry

    scope = _scope()
    made: list[int] = []
    real = MemoryEntry.from_row.__func__  # type: ignore[attr-defined]

    def counted(cls: type[MemoryEntry], r: Any) -> MemoryEntry:
        made.append(1)
        return real(cls, r)  # type: ignore[no-any-return]

    async with await open_store(store_url) as store:
        memory = MemoryStore(store=store)
        for i in range(12):
            await memory.add(scope="user", owner=scope.user, text=f"fact {i}", audit=AUDIT)
        await _open(memory, scope)  # renders and keeps the block
        monkeypatch.setattr(MemoryEntry, "from_row", classmethod(counted))
        reused = await _open(memory, scope)
        assert "fact 11" in reused.prompt() and made == []
        await reused.add("user", "fact 12", turn_id="t")
        block = reused.prompt()
        assert all(f"fact {i}" in block for i in range(13)) and len(made) == 12
