"""A request asked in a Telegram thread is approved from the console: the same durable
decision, the write runs once, the thread's request message is edited to say who decided
and where, and the thread's own /approve afterwards changes nothing."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from bots.console import Identity, issue_link
from bots.console.app import ConsoleDeps
from bots.console.routes import build_app
from bots.workspaces import binding_workspace
from geode.settings import ConsoleSettings, Settings
from geode.store import Store
from tests.bots.conftest import CHAT, finals
from tests.bots.test_approvals import _asked, _posted, _request_message

pytestmark = pytest.mark.timeout(60)


async def test_approving_in_the_console_runs_the_thread_s_call_once(
        make_stack: Any, fake: Any) -> None:
    stack, _ = await _asked(make_stack, fake)  # approvers: 43
    ws = binding_workspace(stack.home, stack.bindings[0])
    await _posted(stack, fake)
    store = stack.daemon.database
    assert isinstance(store, Store)
    settings = Settings(home=stack.home, bindings=stack.bindings,
                        console=ConsoleSettings(enabled=True))
    deps = ConsoleDeps(store=store, settings=settings, base_url="http://127.0.0.1:8788")
    client: TestClient[Any, Any] = TestClient(TestServer(build_app(deps)))
    await client.start_server()
    try:
        url = await issue_link(store, settings, Identity("telegram", "43"), via="cli",
                               base=deps.base_url)
        token = url.split("token=", 1)[1]
        r = await client.post("/signin", data={"token": token}, allow_redirects=False)
        assert r.status == 303
        page = await (await client.get("/approvals")).text()
        request_id = re.search(r'action="/approvals/(\d+)"', page)
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert request_id is not None and csrf is not None
        r = await client.post(f"/approvals/{request_id.group(1)}",
                              data={"decision": "approve", "csrf": csrf.group(1)},
                              headers={"Accept": "application/json"})
        assert r.status == 200 and (await r.json())["applied"]
        await fake.wait_until(lambda: finals(fake, "done"), within=15)
        assert (ws / "notes.txt").read_text() == "hello\nworld\n"
        await fake.wait_until(
            lambda: _request_message(fake).plain_text.startswith("✅ write_file ("), within=10)
        assert "approved by web console (43)" in _request_message(fake).plain_text
        # the thread's own /approve now finds it decided
        fake.user_says(CHAT, "/approve", from_user=43,
                       reply_to=_request_message(fake).message_id)
        await fake.wait_until(lambda: any("already" in s.plain_text for s in fake.sent),
                              within=10)
        assert len(finals(fake, "done")) == 1
    finally:
        await client.close()
