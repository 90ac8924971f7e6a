"""The echo chat itself: an in-process loopback chat service (no network at all).

People :meth:`EchoChat.post` messages into channels; the bot's connector takes them from
:meth:`EchoChat.next_message` and answers with :meth:`EchoChat.send` / :meth:`EchoChat.edit`.
A chat is found by name (``[channels.echo] chat = "NAME"``), as a real platform is found by
its URL.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import ClassVar

__all__ = ["EchoChat", "EchoMessage"]


@dataclass(kw_only=True)
class EchoMessage:
    """One message in a channel (the bot's messages are edited in place)."""

    id: str
    channel: str
    sender: str
    text: str
    thread_root: str
    date: int = field(default_factory=lambda: int(time.time()))
    edits: list[str] = field(default_factory=list)


class EchoChat:
    """An in-process chat service with one bot account."""

    _open: ClassVar[dict[str, EchoChat]] = {}

    def __init__(self, *, name: str, token: str, bot: str = "echo_bot") -> None:
        self.name = name
        self.token = token
        self.bot = bot
        self.messages: list[EchoMessage] = []
        self._ids = itertools.count(1)
        self._inbox: asyncio.Queue[EchoMessage] = asyncio.Queue()

    async def __aenter__(self) -> EchoChat:
        EchoChat._open[self.name] = self
        return self

    async def __aexit__(self, *exc: object) -> None:
        EchoChat._open.pop(self.name, None)

    @classmethod
    def named(cls, name: str) -> EchoChat | None:
        """The open chat called ``name`` (None: it cannot be reached)."""
        return cls._open.get(name)

    def post(self, channel: str, sender: str, text: str, *,
             thread_root: str | None = None) -> EchoMessage:
        """A person's message (a new thread unless ``thread_root``)."""
        msg = self._add(channel, sender, text, thread_root)
        self._inbox.put_nowait(msg)
        return msg

    async def next_message(self, token: str) -> EchoMessage:
        """The next message for the bot (what a long poll would return)."""
        self._check(token)
        return await self._inbox.get()

    def send(self, token: str, channel: str, text: str, *, thread_root: str) -> str:
        self._check(token)
        return self._add(channel, self.bot, text, thread_root).id

    def edit(self, token: str, message_id: str, text: str) -> None:
        self._check(token)
        (msg,) = [m for m in self.messages if m.id == message_id and m.sender == self.bot]
        msg.edits.append(msg.text)
        msg.text = text

    def bot_messages(self, channel: str) -> list[EchoMessage]:
        return [m for m in self.messages if m.channel == channel and m.sender == self.bot]

    def _add(self, channel: str, sender: str, text: str, thread_root: str | None) -> EchoMessage:
        mid = str(next(self._ids))
        msg = EchoMessage(id=mid, channel=channel, sender=sender, text=text,
                          thread_root=thread_root or mid)
        self.messages.append(msg)
        return msg

    def _check(self, token: str) -> None:
        if token != self.token:
            raise PermissionError("invalid token")
