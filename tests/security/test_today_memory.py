"""The attacker's view of today's memory read (folded into the session load, the rendered
block kept per process for reuse): one person's memory must never reach another person's
turn, in the same binding or another, however their turns interleave, and a block kept for
reuse must never be served to a turn of someone else."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from geode.memory import MemoryRead, MemoryScope
from geode.store import open_store
from geode.store.memory import MemoryAudit, MemoryStore

AUDIT = MemoryAudit(by="cli", via="cli")


async def test_interleaved_turns_of_two_people_in_two_bindings_see_only_their_own(
        tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    people = [f"slack:U{tag}A", f"slack:U{tag}B"]
    bindings = [f"slack:C{tag}1", f"slack:C{tag}2"]
    async with await open_store(f"sqlite:///{tmp_path / 'geode.db'}") as store:
        memory = MemoryStore(store=store)
        for p in people:
            await memory.add(scope="user", owner=p, text=f"secret of {p}", audit=AUDIT)
        for b in bindings:
            await memory.add(scope="channel", owner=b, text=f"shared in {b}", audit=AUDIT)

        async def turn(person: str, binding: str, mode: str) -> tuple[str, str, str, str]:
            scope = MemoryScope(mode=mode, user=person, channel=binding)  # type: ignore[arg-type]
            read = MemoryRead(store=memory, scope=scope, budget_tokens=2000)
            await asyncio.sleep(0)
            opened = await read.open(f"s-{person}-{binding}")
            return person, binding, mode, opened.prompt()

        for _ in range(3):  # the second and third rounds are served from kept blocks
            results = await asyncio.gather(*(
                turn(p, b, m) for m in ("user", "channel") for b in bindings for p in people))
            for person, binding, mode, block in results:
                other_people = [p for p in people if p != person]
                other_bindings = [b for b in bindings if b != binding]
                assert f"secret of {person}" in block
                assert not any(f"secret of {o}" in block for o in other_people), block
                assert not any(f"shared in {o}" in block for o in other_bindings), block
                assert (f"shared in {binding}" in block) == (mode == "channel"), block
                assert person in block and not any(o in block for o in other_people)


async def test_nobody_known_sees_no_one_s_user_memory(tmp_path: Path) -> None:
    """A turn whose speaker is unknown (an empty user id) shares its kept block key with no
    person: it sees the channel's memory only."""
    tag = uuid.uuid4().hex[:6]
    async with await open_store(f"sqlite:///{tmp_path / 'geode.db'}") as store:
        memory = MemoryStore(store=store)
        await memory.add(scope="user", owner="", text="ownerless fact", audit=AUDIT)
        await memory.add(scope="user", owner=f"slack:U{tag}", text="a person's", audit=AUDIT)
        known = MemoryScope(mode="channel", user=f"slack:U{tag}", channel=f"slack:C{tag}")
        nobody = MemoryScope(mode="channel", user="", channel=f"slack:C{tag}")
        for scope in (known, nobody, known, nobody):
            block = (await MemoryRead(store=memory, scope=scope,
                                      budget_tokens=2000).open("s")).prompt()
            assert ("a person's" in block) == bool(scope.user), block
            assert "ownerless fact" not in block, block
