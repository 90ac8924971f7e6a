"""Issue #30 finding 10 on Telegram, approvals and pairing: a malformed approval id is refused,
never read as "the pending one"; a non-approver's clicks and ``/approve`` put nothing in the
thread (a toast for a click); messages sent as a chat (``sender_chat``) mint no pairing
code."""

from __future__ import annotations

import asyncio
from typing import Any

from bots.workspaces import binding_workspace
from tests.bots.conftest import CHAT, binding, finals, settled
from tests.bots.test_approvals import _asked, _posted


async def _done(stack: Any, fake: Any) -> None:
    """Every update recorded and no command among them still running."""
    c = stack.connector
    async with asyncio.timeout(10):
        while fake.pending_updates or any(
                e.event.text.startswith("/") for e in
                await c.layer.inbound.unfinished(c.platform, c.workspace)):
            await asyncio.sleep(0.02)


async def _pending(stack: Any) -> list[Any]:
    return await stack.connector.layer.approvals.pending(platform="telegram")


async def test_a_malformed_id_decides_nothing(make_stack, fake):
    stack, _ = await _asked(make_stack, fake)
    ws = binding_workspace(stack.home, stack.bindings[0])
    await _posted(stack, fake)
    for junk in ("%", "_", "*", "K7Q2XM%", "'1'='1'"):
        fake.user_says(CHAT, f"/approve {junk}", from_user=43)  # the approver, no such id
    await fake.wait_until(lambda: len([s for s in fake.sent if "not an approval request id"
                                       in s.plain_text]) == 5, within=10)
    [rec] = await _pending(stack)
    assert rec.pending and not (ws / "notes.txt").exists()


async def test_a_non_approver_floods_nothing_into_the_thread(make_stack, fake):
    stack, _ = await _asked(make_stack, fake)
    req = await _posted(stack, fake)
    before = len(fake.messages_in(CHAT, from_bot=True))
    for _ in range(5):
        fake.user_clicks(CHAT, req.message_id, from_user=42, button="Approve")
        fake.user_says(CHAT, "/approve", from_user=42, reply_to=req.message_id)
    await fake.wait_until(lambda: len(fake.calls_to("answerCallbackQuery")) == 5, within=10)
    await _done(stack, fake)
    assert all("Only 43 may approve" in c.params["text"]
               for c in fake.calls_to("answerCallbackQuery"))  # each click: a toast
    assert not any("Only 43" in s.plain_text for s in fake.sent)
    assert len(fake.messages_in(CHAT, from_bot=True)) == before
    [rec] = await _pending(stack)
    assert rec.pending
    # the approver decides; by the turn's answer any notice queued before it was sent too
    fake.user_says(CHAT, f"/approve {rec.short_id}", from_user=43)
    await fake.wait_until(lambda: finals(fake, "done"), within=10)
    assert not any("Only 43" in s.plain_text for s in fake.sent)


async def test_messages_sent_as_a_chat_mint_no_pairing_code(make_stack, fake):
    stack = make_stack(bindings=[binding(allow_users=["42"])])
    await stack.start()
    # a channel's posts auto-forwarded into its discussion group come "from" Telegram
    # (777000, not a bot), with the channel as sender_chat
    telegram = {"id": 777000, "is_bot": False, "first_name": "Telegram"}
    for i in range(4):
        fake.user_says(CHAT, f"@geode_bot hi {i}", from_user=telegram, extra={
            "sender_chat": {"id": -1009990000 - i, "type": "channel", "title": f"c{i}"},
            "is_automatic_forward": True})
    await _done(stack, fake)
    await settled(stack)  # notices sent too
    assert not any("Pairing code" in s.plain_text for s in fake.sent)
    assert await stack.connector.layer.pairing.list() == []
