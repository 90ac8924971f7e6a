"""Sender policy: default deny, allow-list per binding, pairing codes for everyone else.

An unknown sender who addresses the bot gets one pairing code per hour (never more: a
flood of messages must not become a flood of replies), and the platform as a whole gets
at most ``max_new_per_hour`` new codes (``bots.store.pairing``). ``geode pairing approve
CODE`` allows the sender on that platform for good.
"""

from __future__ import annotations

from typing import Literal

from bots.events import InboundEvent
from bots.store import Tx
from bots.store.pairing import PairingStore
from geode.settings import BindingSettings

__all__ = ["SenderPolicy", "SenderVerdict"]

SenderVerdict = Literal["allowed", "unknown", "bot"]


class SenderPolicy:
    """Decide whether an event's sender may use a binding."""

    def __init__(self, *, pairing: PairingStore) -> None:
        self.pairing = pairing

    async def verdict(self, event: InboundEvent, binding: BindingSettings) -> SenderVerdict:
        if event.sender_is_bot and not binding.allow_bots:
            return "bot"
        if event.sender in binding.allow_users:
            return "allowed"
        if await self.pairing.is_approved(event.platform, event.sender):
            return "allowed"
        return "unknown"

    async def pairing_text(
        self, event: InboundEvent, *, conn: Tx | None = None
    ) -> str | None:
        """The one pairing message for an unknown sender, or None (already sent / capped, or
        a message sent as a chat, which names no person to pair)."""
        if event.extra.get("sender_chat"):
            return None
        code = await self.pairing.issue(
            platform=event.platform, sender=event.sender, sender_name=event.sender_name,
            channel=event.channel, conn=conn,
        )
        if code is None:
            return None
        return (
            f"I don't know you yet. Pairing code: {code}\n"
            f"Ask the operator to run: geode pairing approve {code}\n"
            "(valid for one hour)"
        )
