"""The echo chat's connector: its intake hands each message to the layer as a neutral event;
replies go back as plain text. Everything else (bindings, senders, durability, turns,
progress, the outbox) is the shared layer's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from bots.connector import BaseConnector, PlatformUnreachableError
from bots.events import InboundEvent, ReplyTarget
from bots.format import Chunk
from bots.port import TurnHost
from bots.testing.echo.chat import EchoChat, EchoMessage
from bots.testing.echo.options import EchoOptions
from geode.settings import BindingSettings, Secrets, Settings

__all__ = ["EchoConnector", "build_connector"]


def build_connector(*, host: TurnHost, settings: Settings, secrets: Secrets,
                    options: EchoOptions) -> EchoConnector:
    """The connector of ``[channels.echo]`` (its spec's builder, ``geode serve``)."""
    from bots.platforms import required_secret
    from bots.testing.echo.options import SPEC

    return EchoConnector(host=host, token=required_secret(SPEC, options, secrets, SPEC.tokens[0]),
                         bindings=settings.bindings, options=options)


class EchoConnector(BaseConnector):
    platform: ClassVar[str] = "echo"
    text_limit: ClassVar[int] = 4000

    def __init__(self, *, host: TurnHost, token: str, bindings: Sequence[BindingSettings],
                 options: EchoOptions) -> None:
        super().__init__(host=host, bindings=bindings, options=options)
        self.opts = options
        self.token = token
        self.chat: EchoChat | None = None

    async def connect(self) -> None:
        self.chat = EchoChat.named(self.opts.chat)
        if self.chat is None:
            raise PlatformUnreachableError(f"echo chat {self.opts.chat!r} is not open")
        self.workspace = self.opts.chat
        self.start_supervisor(lease_name=f"echo:{self.workspace}", ttl_s=self.opts.lease_ttl_s,
                              work=self._poll)

    async def _poll(self) -> None:
        assert self.chat is not None
        while True:
            self.intake_health.beat("waiting for messages")
            msg = await self.chat.next_message(self.token)
            # recorded before it is taken for good (durable inbound)
            await self.submit([(self._event(msg), "received")])

    def _event(self, msg: EchoMessage) -> InboundEvent:
        assert self.chat is not None
        return InboundEvent(
            platform=self.platform, workspace=self.workspace, channel=msg.channel,
            thread_root=msg.thread_root, message_id=msg.id, sender=msg.sender,
            dedupe_key=f"{msg.channel}:{msg.id}", text=msg.text,
            mentions_bot=f"@{self.chat.bot}" in msg.text, date=msg.date)

    async def disconnect(self) -> None:
        await self.release_processing()

    async def send(self, target: ReplyTarget, chunk: Chunk, *, plain: bool = False) -> str:
        assert self.chat is not None
        text = chunk.fallback if plain else chunk.formatted
        return self.chat.send(self.token, target.channel, text, thread_root=target.thread_root)

    async def edit(self, target: ReplyTarget, message_id: str, chunk: Chunk, *,
                   plain: bool = False) -> None:
        assert self.chat is not None
        self.chat.edit(self.token, message_id, chunk.fallback if plain else chunk.formatted)

    def render(self, markdown: str) -> list[Chunk]:
        limit = self.text_limit
        return [Chunk(formatted=markdown[i:i + limit], fallback=markdown[i:i + limit])
                for i in range(0, max(len(markdown), 1), limit)]

    def render_progress(self, text: str) -> Chunk:
        return Chunk(formatted=text, fallback=text)

    def bot_user_id(self) -> str | None:
        return None if self.chat is None else self.chat.bot

    def bot_username(self) -> str | None:
        return self.bot_user_id()
