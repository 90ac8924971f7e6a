"""Fixtures for the web chat: a real ``Daemon`` hosting the web-chat connector, and the
console's application on a loopback test server (the same store), with signed-in browsers."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from bots.console import Identity, issue_link
from bots.console.app import ConsoleDeps
from bots.console.routes import build_app
from bots.webchat.connector import WebChatConnector
from bots.webchat.options import WebChatOptions
from geode.daemon import Daemon
from geode.providers.scripted import ScriptedProvider
from geode.settings import BindingSettings, ConsoleSettings, Settings
from tests.bots._harness import DaemonHost, echo

ALICE = Identity("webchat", "alice")
BOB = Identity("webchat", "bob")
#: alice chats on "ops" (and approves there); bob approves on "team2" only
BINDINGS = [
    BindingSettings(platform="webchat", channel="ops", allow_users=["alice"],
                    approve=["write_file"], approvers=["alice"]),
    BindingSettings(platform="webchat", channel="team2", allow_users=["bob"],
                    approvers=["bob"]),
]


@dataclass
class Browser:
    """One signed-in browser (its own cookie jar)."""

    client: TestClient[Any, Any]

    async def csrf(self, path: str = "/chat") -> str:
        found = re.search(r'name="csrf" value="([0-9a-f]+)"',
                          await (await self.client.get(path)).text())
        assert found is not None
        return found.group(1)

    async def json(self, path: str) -> tuple[int, Any]:
        r = await self.client.get(path, headers={"Accept": "application/json"})
        return r.status, await r.json()

    async def post(self, path: str, data: Any, *,
                   headers: dict[str, str] | None = None) -> tuple[int, Any]:
        r = await self.client.post(path, data=data,
                                   headers=headers or {"Accept": "application/json"},
                                   allow_redirects=False)
        body = await r.text()
        return r.status, body

    async def open_thread(self, text: str, channel: str = "ops") -> str:
        """Open a thread with its first message; its URL."""
        import json

        status, body = await self.post("/chat", {"channel": channel, "text": text,
                                                 "csrf": await self.csrf()})
        assert status == 200, body
        return str(json.loads(body)["thread"])

    async def messages(self, url: str) -> list[dict[str, Any]]:
        status, page = await self.json(url)
        assert status == 200, page
        return list(page["messages"])


@dataclass
class ChatStack(DaemonHost):
    """A daemon + the web-chat connector + the console app, restartable on one home."""

    home: Path
    provider: ScriptedProvider
    bindings: list[BindingSettings]
    daemon: Daemon | None = None
    connector: WebChatConnector | None = None
    options: dict[str, Any] = field(default_factory=dict)
    fault: Callable[[str], None] | None = None
    clients: list[TestClient[Any, Any]] = field(default_factory=list)
    deps: ConsoleDeps | None = None

    async def start(self) -> WebChatConnector:
        daemon = self.new_daemon()
        self.connector = WebChatConnector(host=daemon, bindings=self.bindings,
                                          options=WebChatOptions(**{
                                              "progress_edit_interval_s": 0.0,
                                              "typing_delay_s": 0.0, "lease_ttl_s": 3.0,
                                              "pump_interval_s": 0.2, "poll_interval_s": 0.1,
                                              **self.options}),
                                          fault=self.fault)
        daemon.add_connector(self.connector)
        await daemon.start()
        settings = Settings(home=self.home, bindings=self.bindings,
                            console=ConsoleSettings(enabled=True))
        assert daemon.database is not None
        self.deps = ConsoleDeps(store=daemon.database, settings=settings,  # type: ignore[arg-type]
                                base_url="http://127.0.0.1:8788")
        return self.connector

    async def sign_in(self, who: Identity) -> Browser:
        assert self.deps is not None
        client: TestClient[Any, Any] = TestClient(TestServer(build_app(self.deps)))
        await client.start_server()
        self.clients.append(client)
        url = await issue_link(self.deps.store, self.deps.settings, who, via="cli",
                               base=self.deps.base_url)
        token = url.split("token=", 1)[1]
        r = await client.post("/signin", data={"token": token}, allow_redirects=False)
        assert r.status == 303, await r.text()
        return Browser(client)

    async def close_clients(self) -> None:
        for c in self.clients:
            await c.close()
        self.clients.clear()

    async def stop(self) -> None:
        await self.close_clients()
        await super().stop()


async def wait_for(check: Callable[[], Any], within: float = 15.0) -> Any:
    """Until ``await check()`` is truthy; its value."""
    async with asyncio.timeout(within):
        while True:
            found = await check()
            if found:
                return found
            await asyncio.sleep(0.05)


@pytest.fixture
async def make_chat(home: Path) -> AsyncIterator[Callable[..., ChatStack]]:
    stacks: list[ChatStack] = []

    def make(provider: ScriptedProvider | None = None, **kw: Any) -> ChatStack:
        s = ChatStack(home=home, provider=provider or ScriptedProvider([echo], repeat_last=True),
                      bindings=kw.pop("bindings", BINDINGS), **kw)
        stacks.append(s)
        return s

    yield make
    for s in stacks:
        await s.stop()
