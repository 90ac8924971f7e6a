"""Fixtures for the Discord connector: a real ``Daemon`` hosting a real discord.py-based
DiscordConnector against the wire-level FakeDiscord (import the fixtures into a test module)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bots.discord import DiscordConnector, DiscordOptions
from geode.daemon import Daemon
from geode.messages import Message
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider
from geode.settings import BindingSettings, load_settings
from geode.testing.fake_discord import FakeDiscord

TOKEN = "fake-bot-token"


def echo(request: ModelRequest) -> str:
    """A scripted answer naming the latest user message it answers (text after 'id N): ')."""
    for m in reversed(request.messages):
        if m.role == "user" and m.text and "(id " in m.text:
            return f"answer to: {m.text.rsplit('): ', 1)[-1]}"
    return "answer to: ?"


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
class DStack:
    """A daemon + Discord connector, restartable on the same home/store."""

    home: Path
    fake: FakeDiscord
    provider: ScriptedProvider
    bindings: list[BindingSettings]
    options: dict[str, Any] = field(default_factory=dict)
    fault: Callable[[str], None] | None = None
    daemon: Daemon | None = None
    connector: DiscordConnector | None = None

    async def start(self, *, wait_ready: bool = True) -> DiscordConnector:
        settings, secrets = load_settings(
            env={"GEODE_HOME": str(self.home)}, health_port=0, bindings=self.bindings,
            store={"url": f"sqlite:///{self.home / 'geode.db'}"},
            lanes={"global_cap": 64, "channel_cap": 64},
        )
        self.daemon = Daemon(settings=settings, secrets=secrets,
                             provider_factory=lambda: self.provider,
                             workspace=self.home / "ws", drain_timeout_s=0.5)
        opts = DiscordOptions(
            api_base=self.fake.api_base, gateway_url=self.fake.gateway_url,
            guild_ready_timeout_s=0.05, identify_delay_s=0.0, progress_edit_interval_s=0.0,
            typing_interval_s=30.0, lease_ttl_s=3.0, pump_interval_s=0.2,
            **self.options,
        )
        self.connector = DiscordConnector(host=self.daemon, token=TOKEN, bindings=self.bindings,
                                          options=opts, fault=self.fault)
        self.daemon.add_connector(self.connector)
        before = self.connector.catch_ups
        await self.daemon.start()
        if wait_ready:
            c = self.connector
            await self.fake.wait_for(lambda: c.catch_ups > before + 1 and not c.standby
                                     and c.layer is not None and c.layer.processing,
                                     timeout=10)
        return self.connector

    async def stop(self) -> None:
        if self.daemon is not None:
            await self.daemon.shutdown()
            self.daemon = None

    async def crash(self) -> None:
        """Tasks die with no drain (turns are cancelled mid-flight); the store is left as is."""
        if self.daemon is None:
            return
        self.daemon.drain_timeout_s = 0.0
        await self.stop()

    @property
    def store(self) -> Any:
        assert self.daemon is not None and self.daemon.runtime is not None
        return self.daemon.runtime.store


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


def user_messages(messages: list[Message]) -> list[str]:
    return [m.text for m in messages if m.role == "user" and m.text]


def said(messages: list[Message]) -> list[str]:
    return [t.rsplit("): ", 1)[-1] for t in user_messages(messages)]


def sid(fake: FakeDiscord, root: int, channel: int | None = None) -> str:
    return f"discord:{fake.bot_id}:{channel or fake.channel_id}:{root}"


async def wait_shown(fake: FakeDiscord, text: str, timeout: float = 10) -> None:
    await fake.wait_for(lambda: shown(fake, text), timeout=timeout)
