"""Stop on a thread's console page stops its running turn as ``/stop`` in the thread does
(the same registry of running turns), with the CSRF token, and records who stopped it in the
timeline; the page shows the running turn with its Stop button while it runs."""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp.test_utils import TestClient, TestServer

from bots.console import Identity, issue_link
from bots.console.app import ConsoleDeps
from bots.console.routes import build_app
from bots.console.service import running_turns
from geode.providers.scripted import ScriptedProvider
from geode.settings import ConsoleSettings, Settings
from geode.store import Store
from tests.bots.conftest import CHAT, binding

pytestmark = pytest.mark.timeout(60)


async def test_stop_from_the_thread_page_stops_the_running_turn(
        make_stack: Any, fake: Any) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    class Slow(ScriptedProvider):
        async def complete(self, request: Any) -> Any:  # a model that waits until stopped
            self.calls.append(request)
            started.set()
            await release.wait()
            return self._to_response("late", request.model)

    stack = make_stack(provider=Slow(), bindings=[binding(approvers=["43"])])
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot long job", from_user=42))
    await asyncio.wait_for(started.wait(), 10)
    store = stack.daemon.database
    assert isinstance(store, Store)
    settings = Settings(home=stack.home, bindings=stack.bindings,
                        console=ConsoleSettings(enabled=True))
    deps = ConsoleDeps(store=store, settings=settings, base_url="http://127.0.0.1:8788",
                       running=running_turns(stack.daemon.connectors))
    client: TestClient[Any, Any] = TestClient(TestServer(build_app(deps)))
    await client.start_server()
    try:
        url = await issue_link(store, settings, Identity("telegram", "43"), via="cli",
                               base=deps.base_url)
        r = await client.post("/signin", data={"token": url.split("token=", 1)[1]},
                              allow_redirects=False)
        assert r.status == 303
        sid = f"telegram:123456:{CHAT}:{mid}"
        path = "/threads/" + quote(sid, safe="")
        page = await (await client.get(path)).text()
        assert "Running now" in page and f'action="{path}/stop"' in page
        status, data = await _json(client, path)
        assert status == 200 and data["running"]["session_id"] == sid
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert csrf is not None
        # without the CSRF token nothing happens
        r = await client.post(f"{path}/stop", data={})
        assert r.status == 403
        assert not data["running"]["stopping"]
        r = await client.post(f"{path}/stop", data={"csrf": csrf.group(1)},
                              allow_redirects=False)
        assert r.status == 303
        await fake.wait_until(
            lambda: any(s.plain_text.startswith("⏹ Stopped") for s in fake.sent), within=10)
        rows = await store.timeline.list(sid, limit=500)
        [stopped] = [row for row in rows if row.kind == "console.stop"]
        assert stopped.payload["by"] == "telegram:43" and stopped.payload["applied"] is True
        assert any(row.kind == "console.stop" for row in await store.timeline.list("console"))
        # nothing runs now: the page has no Stop, a second Stop says so
        await _until_idle(client, path)
        r = await client.post(f"{path}/stop", data={"csrf": csrf.group(1)},
                              headers={"Accept": "application/json"})
        assert r.status == 409 and (await r.json())["stopped"] is False
    finally:
        release.set()
        await client.close()


async def _json(client: TestClient[Any, Any], path: str) -> tuple[int, Any]:
    r = await client.get(path, headers={"Accept": "application/json"})
    return r.status, await r.json()


async def _until_idle(client: TestClient[Any, Any], path: str) -> None:
    async with asyncio.timeout(10):
        while (await _json(client, path))[1]["running"] is not None:
            await asyncio.sleep(0.05)
