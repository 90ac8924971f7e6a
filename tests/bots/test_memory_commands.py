"""/memory and /forget through a real Telegram thread: what the bot remembers about the
sender and the channel; one's own entries forgotten always, another person's never, a
channel entry only by the binding's approvers; each removal on the timeline with who."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from bots.testing.telegram import FakeTelegramServer
from geode.providers.scripted import ScriptedProvider
from geode.store import open_store
from geode.store.models import timeline_table
from tests.bots.conftest import CHAT, Stack, binding, settled, store_url_for
from tests.bots.test_memory_channel import entries, obeys, said, turn


async def command(stack: Stack, fake: FakeTelegramServer, text: str, *, user: int,
                  expect: str) -> str:
    fake.user_says(CHAT, text, from_user=user)
    await fake.wait_until(lambda: said(fake, expect), within=15)
    await settled(stack, within=15)
    return said(fake, expect)[-1]


async def test_memory_and_forget_commands(make_stack, fake: FakeTelegramServer,
                                          home: Any) -> None:
    provider = ScriptedProvider([obeys], repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding(
        memory="channel", tools=["memory"], approvers=["42"])])
    await stack.start()
    for user, scope, text in ((43, "user", "43 likes green"), (43, "user", "43 is in Oslo"),
                              (42, "user", "42 likes red"),
                              (43, "channel", "release freeze until May")):
        await turn(stack, fake, f'memory {{"action": "add", "scope": "{scope}", "text": '
                   f'"{text}"}}', user=user)
    by_text = {e.text: e for e in await entries(home)}

    shown = await command(stack, fake, "/memory", user=43, expect="What I remember about you")
    assert "43 likes green" in shown and "43 is in Oslo" in shown
    assert "release freeze until May" in shown  # the channel's, for everyone
    assert "42 likes red" not in shown  # another person's memory is never shown

    # another person's entry cannot be forgotten by its id; a channel entry only by approvers
    red = by_text["42 likes red"].id
    assert "No memory entry" in await command(stack, fake, f"/forget {red}", user=43,
                                              expect="No memory entry")
    freeze = by_text["release freeze until May"].id
    assert "approvers" in await command(stack, fake, f"/forget {freeze}", user=43,
                                        expect="Only this channel's approvers")
    green = by_text["43 likes green"].id
    await command(stack, fake, f"/forget {green}", user=43, expect=f"🧹 Forgot {green}.")
    await command(stack, fake, f"/forget {freeze}", user=42,
                  expect=f"🧹 Forgot {freeze} (channel memory)")
    assert {e.text for e in await entries(home)} == {"43 is in Oslo", "42 likes red"}
    await command(stack, fake, "/forget all", user=43, expect="🧹 Forgot 1 entry about you")
    assert {e.text for e in await entries(home)} == {"42 likes red"}

    # each removal is a timeline row of the thread's session, naming who caused it
    async with await open_store(store_url_for(home)) as store, store.read() as conn:
        rows = (await conn.execute(select(timeline_table).where(
            timeline_table.c.kind == "memory.removed").order_by(timeline_table.c.id))).all()
    removed = [(r.payload["id"], r.payload["by"], r.payload["via"]) for r in rows]
    assert all(r.session_id.startswith(f"telegram:123456:{CHAT}:") for r in rows)
    assert removed == [(green, "telegram:43", "command"), (freeze, "telegram:42", "command"),
                       (by_text["43 is in Oslo"].id, "telegram:43", "command")]


async def test_memory_command_where_memory_is_off(make_stack, fake: FakeTelegramServer) -> None:
    stack = make_stack(bindings=[binding()])
    await stack.start()
    assert "Memory is off" in await command(stack, fake, "/memory", user=42,
                                            expect="Memory is off")
