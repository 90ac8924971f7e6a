"""Fixtures for the channel layer: a real ``Daemon`` (store, lanes, factory) hosting a real
PTB-based TelegramConnector that talks to the wire-level fake Telegram server."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bots.telegram import TelegramConnector, TelegramOptions
from geode.daemon import Daemon
from geode.messages import Message
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider
from geode.settings import BindingSettings, load_settings
from geode.testing.fake_telegram import FakeTelegramServer

PG_URL = os.environ.get("GEODE_TEST_PG_URL", "")
TOKEN = "123456:TEST-TOKEN"
CHAT = -100123
CHAT2 = -100456


def last_user_text(request: ModelRequest) -> str:
    for m in reversed(request.messages):
        if m.role == "user" and m.text:
            return m.text
    return ""


def echo(request: ModelRequest) -> str:
    """A scripted answer naming the latest user message it answers (text after 'id N): ')."""
    for m in reversed(request.messages):
        if m.role == "user" and m.text and "(id " in m.text:
            return f"answer to: {m.text.rsplit('): ', 1)[-1]}"
    return "answer to: ?"


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
class Stack:
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
        settings, secrets = load_settings(
            env={"GEODE_HOME": str(self.home)}, health_port=0, bindings=self.bindings,
            store={"url": self.store_url}, lanes=self.lanes or {"global_cap": 64,
                                                                  "channel_cap": 64},
        )
        self.daemon = Daemon(settings=settings, secrets=secrets,
                             provider_factory=lambda: self.provider,
                             workspace=self.home / "ws", drain_timeout_s=0.5)
        opts = TelegramOptions(
            base_url=self.fake.base_url, base_file_url=self.fake.base_file_url,
            poll_timeout_s=1, progress_edit_interval_s=0.0, typing_interval_s=30.0,
            lease_ttl_s=3.0, pump_interval_s=0.2, rate_group_per_min=0,
            **self.options,
        )
        self.connector = TelegramConnector(host=self.daemon, token=TOKEN,
                                           bindings=self.bindings, options=opts,
                                           fault=self.fault, **self.connector_kw)
        self.daemon.add_connector(self.connector)
        await self.daemon.start()
        return self.connector

    async def stop(self) -> None:
        if self.daemon is not None:
            await self.daemon.shutdown()
            self.daemon = None

    async def crash(self) -> None:
        """Like kill -9 as far as the store is concerned: tasks die, nothing is finished.

        The connector's tasks are cancelled without any graceful step (no drain: turns are
        cancelled mid-flight), then the daemon releases the home.
        """
        if self.daemon is None:
            return
        self.daemon.drain_timeout_s = 0.0
        await self.stop()

    @property
    def store(self) -> Any:
        assert self.daemon is not None and self.daemon.runtime is not None
        return self.daemon.runtime.store


@pytest.fixture
def pg_store_url(pg_url: str) -> Iterator[str]:
    """The root ``pg_url`` (skips, or fails under CI=true, when unset) in a fresh schema."""
    import contextlib
    from urllib.parse import quote

    import psycopg
    from sqlalchemy.engine import make_url

    libpq = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    schema = f"b_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in pg_url else "?"
    try:
        yield f"{pg_url}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with contextlib.suppress(Exception), psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '10s'")  # never hang a run on a leaked session
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


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


def user_messages(messages: list[Message]) -> list[str]:
    return [m.text for m in messages if m.role == "user" and m.text]


def unique() -> str:
    return uuid.uuid4().hex[:8]
