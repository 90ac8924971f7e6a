"""Fixtures for the Discord connector: a real ``Daemon`` hosting a real discord.py-based
DiscordConnector against the wire-level FakeDiscord (import the fixtures into a test module)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _harness import DaemonHost, echo, user_messages

from bots.discord import DiscordConnector, DiscordOptions
from bots.testing.discord import FakeDiscord
from geode.daemon import Daemon
from geode.messages import Message
from geode.providers.scripted import ScriptedProvider
from geode.settings import BindingSettings

TOKEN = "fake-bot-token"


@pytest.fixture
async def dfake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord(token=TOKEN, heartbeat_interval_ms=500) as srv:
        srv.bob = srv.add_user("bob")  # type: ignore[attr-defined]
        srv.stranger = srv.add_user("mallory")  # type: ignore[attr-defined]
        srv.other_channel = srv.add_text_channel(srv.guild_id, "random")  # type: ignore[attr-defined]
        yield srv


def dbinding(fake: FakeDiscord, channel: int | None = None, **kw: Any) -> BindingSettings:
    kw.setdefault("allow_users", [str(fake.user_id), str(fake.bob)])  # type: ignore[attr-defined]
    return BindingSettings(platform="discord", channel=str(channel or fake.channel_id), **kw)


@dataclass
class DStack(DaemonHost):
    """A daemon + Discord connector, restartable on the same home/store."""

    home: Path
    fake: FakeDiscord
    provider: ScriptedProvider
    bindings: list[BindingSettings]
    options: dict[str, Any] = field(default_factory=dict)
    fault: Callable[[str], None] | None = None
    daemon: Daemon | None = None
    connector: DiscordConnector | None = None
    #: None: SQLite in ``home``
    store_url: str | None = None

    async def start(self, *, wait_ready: bool = True) -> DiscordConnector:
        daemon = self.new_daemon(store_url=self.store_url)
        opts = DiscordOptions(
            api_base=self.fake.api_base, gateway_url=self.fake.gateway_url,
            guild_ready_timeout_s=0.05, identify_delay_s=0.0, progress_edit_interval_s=0.0,
            typing_interval_s=30.0, typing_delay_s=0.0, lease_ttl_s=3.0, pump_interval_s=0.2,
            **{"stream": False, "progress_after_ms": 0, **self.options},
        )
        self.connector = DiscordConnector(host=daemon, token=TOKEN, bindings=self.bindings,
                                          options=opts, fault=self.fault)
        daemon.add_connector(self.connector)
        before = self.connector.catch_ups
        await daemon.start()
        if wait_ready:
            c = self.connector
            await self.fake.wait_for(lambda: c.catch_ups > before + 1 and not c.standby
                                     and c.layer is not None and c.layer.processing,
                                     timeout=10)
        return self.connector


@pytest.fixture
async def make_dstack(home: Path, dfake: FakeDiscord) -> AsyncIterator[Callable[..., DStack]]:
    stacks: list[DStack] = []

    def make(provider: ScriptedProvider | None = None,
             bindings: list[BindingSettings] | None = None, **kw: Any) -> DStack:
        s = DStack(home=home, fake=dfake,
                   provider=provider or ScriptedProvider([echo], repeat_last=True),
                   bindings=bindings if bindings is not None else [dbinding(dfake)], **kw)
        stacks.append(s)
        return s

    yield make
    for s in stacks:
        await s.stop()


def texts_in(fake: FakeDiscord, channel_id: int, *, from_bot: bool = True) -> list[str]:
    """Final visible content of a channel's (or thread's) messages."""
    out = []
    for m in fake.messages_in(channel_id) if channel_id in fake.channels else []:
        if (m["author"]["id"] == str(fake.bot_id)) == from_bot:
            out.append(m["content"])
    return out


def visible_everywhere(fake: FakeDiscord, text: str) -> int:
    """How many bot messages anywhere currently show exactly ``text``."""
    return sum(texts_in(fake, cid).count(text) for cid in list(fake.channels))


def shown(fake: FakeDiscord, text: str) -> bool:
    return visible_everywhere(fake, text) > 0


def said(messages: list[Message]) -> list[str]:
    return [t.rsplit("): ", 1)[-1] for t in user_messages(messages)]


def sid(fake: FakeDiscord, root: int, channel: int | None = None) -> str:
    return f"discord:{fake.bot_id}:{channel or fake.channel_id}:{root}"


async def wait_shown(fake: FakeDiscord, text: str, timeout: float = 10) -> None:
    await fake.wait_for(lambda: shown(fake, text), timeout=timeout)
