"""The Usage page lists the scheduler's jobs (read only) to operators, and the bindings with
where each comes from; an approver sees its bindings and no daemon-wide schedule."""

from __future__ import annotations

import time

from bots.store import StoredBindings
from geode.settings import BindingSettings
from geode.store.jobs import Job, ScheduledJobStore
from tests.bots.console.conftest import ALICE, OPERATOR, Console


async def test_usage_lists_schedules_to_operators_and_bindings_with_their_source(
        console: Console) -> None:
    now = int(time.time())
    await ScheduledJobStore(store=console.store).insert(Job(
        id="daily-report", cron="0 9 * * *", prompt="summarise yesterday's <errors>",
        next_run=now + 3600, tz="Europe/Paris"))
    await StoredBindings(store=console.store).add(
        BindingSettings(platform="telegram", channel="-1003", approvers=["42"]))
    op = await console.sign_in(OPERATOR)
    status, page = await op.json("/usage")
    assert status == 200
    [job] = page["schedules"]
    assert (job["id"], job["when"], job["tz"], job["next_run"]) == (
        "daily-report", "0 9 * * *", "Europe/Paris", (now + 3600) * 1000)
    html = await (await op.client.get("/usage")).text()
    assert "<h2>Schedules</h2>" in html and "daily-report" in html
    assert "summarise yesterday&#39;s &lt;errors&gt;" in html  # escaped, never markup
    sources = {b["key"]: b["source"] for b in page["bindings"]}
    assert sources == {"telegram:-1001": "config.toml", "telegram:-1002": "config.toml",
                       "telegram:-1003": "geode bindings add"}
    alice = await console.sign_in(ALICE)
    status, page = await alice.json("/usage")
    assert page["schedules"] is None
    assert [b["key"] for b in page["bindings"]] == ["telegram:-1001", "telegram:-1003"]
    assert "Schedules" not in await (await alice.client.get("/usage")).text()
