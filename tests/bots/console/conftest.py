"""Fixtures for the console: a store, a configuration (two bindings, an operator) and the
console's aiohttp app on a loopback test server, with helpers to sign in."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from bots.console import Identity, issue_link
from bots.console.app import ConsoleDeps
from bots.console.routes import build_app
from bots.store import ApprovalRecord, ApprovalRequests
from geode.settings import BindingSettings, ConsoleSettings, Settings
from geode.store import Store, open_store
from tests.store.conftest import pg_url, sqlite_url, store, store_url

__all__ = ["pg_url", "sqlite_url", "store", "store_url"]

#: approver 42 on chat -1001, approver 77 on chat -1002, operator telegram:1
OPERATOR = Identity("telegram", "1")
ALICE = Identity("telegram", "42")
BOB = Identity("telegram", "77")


def settings_for(home: Any, **console: Any) -> Settings:
    console.setdefault("enabled", True)
    console.setdefault("operators", [str(OPERATOR)])
    return Settings(home=home, console=ConsoleSettings(**console), bindings=[
        BindingSettings(platform="telegram", channel="-1001", allow_users=["42", "5"],
                        approve=["write_file"], approvers=["42"]),
        BindingSettings(platform="telegram", channel="-1002", allow_users=["77"],
                        approve=["write_file"], approvers=["77"]),
    ])


async def open_request(store: Store, *, channel: str, approvers: list[str],
                       call: str = "c1", session: str = "") -> ApprovalRecord:
    session = session or f"telegram::{channel}:10"
    return await ApprovalRequests(store=store).open(
        session_id=session, turn_id="t1", call_id=call, thread_key=session,
        platform="telegram", workspace="", channel=channel, thread_root="10",
        tool="write_file", args={"path": "notes.txt", "content": "hi"},
        summary="write notes.txt (2 bytes)", requested_by="5", requested_by_name="Eve",
        approvers=approvers, timeout_s=300)


@dataclass
class Console:
    """The console's test server and its store."""

    client: TestClient[Any, Any]
    store: Store
    settings: Settings
    deps: ConsoleDeps

    async def link(self, who: Identity) -> str:
        url = await issue_link(self.store, self.settings, who, via="cli",
                               base=self.deps.base_url)
        token = re.search(r"token=([\w-]+)", url)
        assert token is not None, url
        return token.group(1)

    async def sign_in(self, who: Identity) -> Browser:
        """A fresh browser (cookie jar) signed in as ``who``."""
        browser = Browser(await self.new_client())
        token = await self.link(who)
        r = await browser.client.post("/signin", data={"token": token},
                                      allow_redirects=False)
        assert r.status == 303, await r.text()
        return browser

    async def new_client(self) -> TestClient[Any, Any]:
        client: TestClient[Any, Any] = TestClient(TestServer(build_app(self.deps)))
        await client.start_server()
        self._clients.append(client)
        return client

    def __post_init__(self) -> None:
        self._clients: list[TestClient[Any, Any]] = []


@dataclass
class Browser:
    client: TestClient[Any, Any]

    async def csrf(self) -> str:
        r = await self.client.get("/approvals")
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', await r.text())
        assert found is not None
        return found.group(1)

    async def json(self, path: str) -> tuple[int, Any]:
        r = await self.client.get(path, headers={"Accept": "application/json"})
        return r.status, await r.json()


@pytest.fixture
async def console(tmp_path: Any) -> AsyncIterator[Console]:
    home = tmp_path / "home"
    home.mkdir()
    settings = settings_for(home)
    st = await open_store(f"sqlite:///{home / 'geode.db'}")
    deps = ConsoleDeps(store=st, settings=settings, base_url="http://127.0.0.1:8788")
    c = Console(client=None, store=st, settings=settings, deps=deps)  # type: ignore[arg-type]
    c.client = await c.new_client()
    try:
        yield c
    finally:
        for client in c._clients:
            await client.close()
        await st.aclose()
