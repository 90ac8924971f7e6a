"""Stop on a thread's console page reaches a turn running in another replica: the console
that does not run the turn marks a stop request on the thread's lease, and the holder's
heartbeat (which renews that row anyway) stops the turn as ``/stop`` does. Audited with
the signed-in identity; asking twice is one request; nothing running is a 409."""

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
from bots.store.leases import ThreadStops
from geode.providers.scripted import ScriptedProvider
from geode.settings import ConsoleSettings, Settings
from geode.store import Store
from tests.bots.conftest import CHAT, binding
from tests.store.conftest import pg_url, store_url

__all__ = ["pg_url", "store_url"]

pytestmark = pytest.mark.timeout(90)


async def test_stop_from_a_console_that_does_not_run_the_turn(
        make_stack: Any, fake: Any, store_url: str) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    class Slow(ScriptedProvider):
        async def complete(self, request: Any) -> Any:  # a model that waits until stopped
            self.calls.append(request)
            started.set()
            await release.wait()
            return self._to_response("late", request.model)

    stack = make_stack(provider=Slow(), bindings=[binding(approvers=["43"])],
                       store_url=store_url)
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot long job", from_user=42))
    await asyncio.wait_for(started.wait(), 20)
    store = stack.daemon.database
    assert isinstance(store, Store)
    settings = Settings(home=stack.home, bindings=stack.bindings,
                        console=ConsoleSettings(enabled=True))
    # the console of another replica: no turn of this thread runs in its process
    deps = ConsoleDeps(store=store, settings=settings, base_url="http://127.0.0.1:8788",
                       running=lambda key: None)
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
        assert "Running now" in page and "runs on replica" in page
        assert f'action="{path}/stop"' in page
        status, data = await _json(client, path)
        owner = stack.connector.layer.owner
        assert status == 200 and data["running"]["replica"] == owner
        assert not data["running"]["stopping"]
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert csrf is not None
        # without the CSRF token nothing is asked
        r = await client.post(f"{path}/stop", data={})
        assert r.status == 403
        assert (await ThreadStops(store=store).running(
            "telegram", "123456", str(CHAT), str(mid))).stop is None  # type: ignore[union-attr]
        answers = []
        for _ in range(2):  # a double click: the same request
            r = await client.post(f"{path}/stop", data={"csrf": csrf.group(1)},
                                  headers={"Accept": "application/json"})
            assert r.status == 200
            answers.append(await r.json())
        assert answers[0] == answers[1]
        assert answers[0]["requested"] and not answers[0]["stopped"]
        assert answers[0]["replica"] == owner
        # the holder's heartbeat stops it, as /stop would
        await fake.wait_until(
            lambda: any(s.plain_text.startswith("⏹ Stopped") for s in fake.sent), within=20)
        rows = await store.timeline.list(sid, limit=500)
        stops = [row for row in rows if row.kind == "console.stop"]
        assert len(stops) == 2 and all(row.payload["by"] == "telegram:43" for row in stops)
        assert all(row.payload["requested"] and not row.payload["applied"] for row in stops)
        await _until_idle(client, path)
        await asyncio.sleep(1.5)  # another heartbeat: the turn is not stopped twice
        assert sum(s.plain_text.startswith("⏹ Stopped") for s in fake.sent) == 1
        # nothing runs now: a Stop says so, and asks nothing
        r = await client.post(f"{path}/stop", data={"csrf": csrf.group(1)},
                              headers={"Accept": "application/json"})
        assert r.status == 409 and (await r.json())["requested"] is False
    finally:
        release.set()
        await client.close()


async def _json(client: TestClient[Any, Any], path: str) -> tuple[int, Any]:
    r = await client.get(path, headers={"Accept": "application/json"})
    return r.status, await r.json()


async def _until_idle(client: TestClient[Any, Any], path: str) -> None:
    async with asyncio.timeout(20):
        while (await _json(client, path))[1]["running"] is not None:
            await asyncio.sleep(0.05)
