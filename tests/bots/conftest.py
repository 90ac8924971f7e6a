"""Fixtures for the channel layer: a real ``Daemon`` (store, lanes, factory) hosting a real
PTB-based TelegramConnector that talks to the wire-level fake Telegram server."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _harness import DaemonHost, echo, user_messages

from bots.telegram import TelegramConnector, TelegramOptions
from bots.testing.telegram import FakeTelegramServer
from geode.daemon import Daemon
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider
from geode.settings import BindingSettings

__all__ = ["echo", "user_messages"]  # re-exported: the test modules import them from here

PG_URL = os.environ.get("GEODE_TEST_PG_URL", "")
TOKEN = "123456:TEST-TOKEN"
CHAT = -100123
CHAT2 = -100456


def last_user_text(request: ModelRequest) -> str:
    for m in reversed(request.messages):
        if m.role == "user" and m.text:
            return m.text
    return ""


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gb-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as srv:
        yield srv


def binding(channel: int = CHAT, **kw: Any) -> BindingSettings:
    kw.setdefault("allow_users", ["42", "43"])
    return BindingSettings(platform="telegram", channel=str(channel), **kw)


@dataclass
class Stack(DaemonHost):
    """A daemon + Telegram connector, restartable on the same home/store."""

    home: Path
    fake: FakeTelegramServer
    provider: ScriptedProvider
    bindings: list[BindingSettings]
    store_url: str
    options: dict[str, Any] = field(default_factory=dict)
    fault: Callable[[str], None] | None = None
    #: extra TelegramConnector keyword arguments (e.g. ``webhook_secret``)
    connector_kw: dict[str, Any] = field(default_factory=dict)
    daemon: Daemon | None = None
    connector: TelegramConnector | None = None
    lanes: dict[str, Any] = field(default_factory=dict)

    async def start(self) -> TelegramConnector:
        daemon = self.new_daemon(store_url=self.store_url, lanes=self.lanes)
        opts = TelegramOptions(**{
            "base_url": self.fake.base_url, "base_file_url": self.fake.base_file_url,
            "poll_timeout_s": 1, "progress_edit_interval_s": 0.0, "typing_interval_s": 30.0,
            "typing_delay_s": 0.0, "lease_ttl_s": 3.0, "pump_interval_s": 0.2,
            "rate_group_per_min": 0,
            # the suites written before streaming: today's progress message, sent at once
            "stream": False, "progress_after_ms": 0,
            **self.options,  # a test's own values win
        })
        self.connector = TelegramConnector(host=daemon, token=TOKEN,
                                           bindings=self.bindings, options=opts,
                                           fault=self.fault, **self.connector_kw)
        daemon.add_connector(self.connector)
        await daemon.start()
        return self.connector


def store_url_for(home: Path) -> str:
    return f"sqlite:///{home / 'geode.db'}"


@pytest.fixture
async def make_stack(
    home: Path, fake: FakeTelegramServer
) -> AsyncIterator[Callable[..., Stack]]:
    stacks: list[Stack] = []

    def make(provider: ScriptedProvider | None = None,
             bindings: list[BindingSettings] | None = None, **kw: Any) -> Stack:
        s = Stack(home=home, fake=fake,
                  provider=provider or ScriptedProvider([echo], repeat_last=True),
                  bindings=bindings if bindings is not None else [binding()],
                  store_url=kw.pop("store_url", store_url_for(home)), **kw)
        stacks.append(s)
        return s

    yield make
    for s in stacks:
        await s.stop()


def bot_texts(fake: FakeTelegramServer, chat: int = CHAT) -> list[str]:
    return [m.plain_text for m in fake.messages_in(chat, from_bot=True)]


def finals(fake: FakeTelegramServer, text: str) -> list[Any]:
    """sendMessage/editMessageText records whose visible text is ``text``."""
    return [s for s in fake.sent if s.plain_text == text]


async def settled(stack: Stack, *, within: float = 10.0) -> None:
    """Wait until every recorded event is decided and every queued reply or notice is sent.

    The events of one ``getUpdates`` batch in different threads are dispatched at once, so
    "the last message was answered" says nothing about the others' notices.
    """
    c = stack.connector
    assert c is not None and c.layer is not None
    layer = c.layer
    async with asyncio.timeout(within):
        while (await layer.inbound.unfinished(c.platform, c.workspace)
               or await layer.outbox.open_rows(c.platform, c.workspace)):
            await asyncio.sleep(0.02)


def unique() -> str:
    return uuid.uuid4().hex[:8]
