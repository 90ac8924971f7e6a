"""/readyz reports each supervised component's real state, and a platform that cannot be
reached at start is an outage, not a configuration error (#30 finding 2, #38 finding 2).

* a component that stalls (no beat within its bound) or is down is a 503 naming it;
* Slack, Discord and Telegram: an API that does not answer at start leaves ``daemon.start``
  running (no exception, so ``geode serve`` never exits 2 for it), ``/readyz`` names
  ``<platform>.connection`` with the error, and the connector connects once the API is up;
* a token the platform rejects at that first attempt stays a ConfigError (exit 2): retrying
  cannot fix it (docs/operations/outages-and-readiness.md).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from geode.daemon import Daemon
from geode.daemon.health import HealthServer
from geode.daemon.metrics import DaemonMetrics
from geode.daemon.supervisor import Backoff, Component
from geode.errors import ConfigError
from geode.settings import load_settings


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="grz-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _daemon(home: Path) -> Daemon:
    settings, secrets = load_settings(env={"GEODE_HOME": str(home)}, health_port=0,
                                      store={"url": f"sqlite:///{home / 'geode.db'}"})
    from geode.providers.scripted import ScriptedProvider

    return Daemon(settings=settings, secrets=secrets,
                  provider_factory=lambda: ScriptedProvider(["ok"], repeat_last=True),
                  workspace=home / "ws", drain_timeout_s=0.5)


@pytest.fixture
async def daemons() -> AsyncIterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for d in started:
        await d.shutdown()


async def _get(port: int) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/readyz") as r:
        return r.status, await r.json()


async def test_readyz_names_a_stalled_component_over_http() -> None:
    now = [0.0]
    pump = Component(name="demo.pump", stale_after_s=5.0, clock=lambda: now[0])
    leases = Component(name="demo.leases", stale_after_s=5.0, clock=lambda: now[0])
    pump.beat("pumping")
    leases.beat("renewing")

    async def fine() -> tuple[bool, str]:
        return True, "ok"

    server = HealthServer(metrics=DaemonMetrics(), checks={"store": fine}, port=0,
                          components=lambda: [pump, leases])
    await server.start()
    try:
        status, body = await _get(server.port)
        assert status == 200 and body["checks"]["demo.pump"] == {"ok": True, "detail": "pumping"}
        now[0] = 7.0
        leases.beat("renewing")  # the lease keeper goes on, the pump does not
        status, body = await _get(server.port)
        assert status == 503
        assert body["checks"]["demo.pump"]["ok"] is False
        assert "stalled" in body["checks"]["demo.pump"]["detail"]
        assert body["checks"]["demo.leases"]["ok"] is True
    finally:
        await server.stop()


async def test_readyz_masks_a_credential_in_what_failed() -> None:
    """/readyz may listen beyond loopback (a container's health port, a scraper): what a
    failure says reaches it masked, as the log line of the same failure is. A library error
    that quotes a request URL or a DSN would otherwise hand out the token in it."""
    from geode.secret_redaction import register_secret

    token = "424242:AAH-readyz-leak-0123456789abcdef"
    register_secret(token)
    conn = Component(name="demo.connection")
    conn.down(f"ClientError: https://api.example.test/bot{token}/getMe refused (attempt 2)")

    async def store_check() -> tuple[bool, str]:
        raise RuntimeError(f"dsn postgresql://geode:{token}@db/geode")

    server = HealthServer(metrics=DaemonMetrics(), checks={"store": store_check}, port=0,
                          components=lambda: [conn])
    await server.start()
    try:
        async with aiohttp.ClientSession() as s, \
                s.get(f"http://127.0.0.1:{server.port}/readyz") as r:
            raw = await r.text()
            status = r.status
    finally:
        await server.stop()
    assert status == 503 and token not in raw
    assert "getMe refused" in raw and "[REDACTED]" in raw


async def _until(pred: Any, within: float) -> None:
    async with asyncio.timeout(within):
        while not pred():
            await asyncio.sleep(0.05)


async def test_slack_unreachable_at_start_keeps_running_then_connects(
    home: Path, daemons: list[Daemon]
) -> None:
    from bots.slack import SlackConnector, SlackOptions
    from bots.testing.slack import FakeSlack

    fake = FakeSlack()
    fake.listen_port = _closed_port()
    daemon = _daemon(home)
    opts = SlackOptions.model_validate({
        "base_url": f"http://127.0.0.1:{fake.listen_port}/api/", "http_port": 0,
        "mode": "http", "lease_ttl_s": 3.0, "pump_interval_s": 0.2})
    connector = SlackConnector(host=daemon, bot_token=fake.bot_token,
                               signing_secret=fake.signing_secret, options=opts)
    connector.connect_backoff = Backoff(initial_s=0.2, max_s=0.5)  # a quick test
    daemon.add_connector(connector)
    daemons.append(daemon)
    await daemon.start()  # does not raise: an outage is not a configuration error
    assert daemon.health is not None
    ready, checks = await daemon.health.readiness()
    assert not ready
    assert "cannot reach the Slack API" in checks["slack.connection"]["detail"], checks
    assert "slack" in checks["connectors"]["detail"]
    await fake.start()
    try:
        await _until(lambda: connector.ready, within=15)
        ready, checks = await daemon.health.readiness()
        assert checks["slack.connection"]["ok"], checks
        assert checks["connectors"]["ok"], checks
    finally:
        await daemon.shutdown()
        daemons.remove(daemon)
        await fake.stop()


async def test_slack_rejected_token_at_start_is_a_configuration_error(
    home: Path, daemons: list[Daemon]
) -> None:
    from bots.slack import SlackConnector, SlackOptions
    from bots.testing.slack import FakeSlack

    async with FakeSlack() as fake:
        daemon = _daemon(home)
        opts = SlackOptions.model_validate({"base_url": fake.base_url, "http_port": 0,
                                            "mode": "http"})
        daemon.add_connector(SlackConnector(host=daemon, bot_token="xoxb-wrong",
                                            signing_secret=fake.signing_secret, options=opts))
        with pytest.raises(ConfigError, match="Slack rejected a token"):
            await daemon.start()


async def test_discord_unreachable_at_start_keeps_running(
    home: Path, daemons: list[Daemon]
) -> None:
    from bots.discord import DiscordConnector, DiscordOptions

    port = _closed_port()
    daemon = _daemon(home)
    opts = DiscordOptions(api_base=f"http://127.0.0.1:{port}/api/v10",
                          gateway_url=f"ws://127.0.0.1:{port}/gateway")
    connector = DiscordConnector(host=daemon, token="MTIz.fake.token", options=opts)
    daemon.add_connector(connector)
    daemons.append(daemon)
    await daemon.start()
    assert daemon.health is not None
    ready, checks = await daemon.health.readiness()
    assert not ready
    assert "cannot reach the Discord API" in checks["discord.connection"]["detail"], checks


async def test_telegram_rejected_token_at_start_is_a_configuration_error(
    home: Path, daemons: list[Daemon]
) -> None:
    from bots.telegram import TelegramConnector, TelegramOptions
    from bots.testing.telegram import FakeTelegramServer

    async with FakeTelegramServer(token="123456:RIGHT") as fake:
        daemon = _daemon(home)
        opts = TelegramOptions(base_url=fake.base_url, base_file_url=fake.base_file_url)
        daemon.add_connector(TelegramConnector(host=daemon, token="123456:WRONG",
                                               options=opts))
        with pytest.raises(ConfigError, match="Telegram rejected the bot token"):
            await daemon.start()


async def test_the_scheduler_runs_supervised_and_readyz_says_when_its_ticks_fail(
    home: Path, daemons: list[Daemon]
) -> None:
    from sqlalchemy.exc import OperationalError

    daemon = _daemon(home)
    daemon.scheduler_tick_s = 0.05
    daemons.append(daemon)
    await daemon.start()
    assert daemon.health is not None and daemon.scheduler is not None
    await _until(lambda: daemon.supervisor.component("scheduler").last_beat is not None, 5)
    ready, checks = await daemon.health.readiness()
    assert checks["scheduler"] == {"ok": True, "detail": "ticking"}, checks

    async def down(_now: float) -> list[Any]:
        raise OperationalError("SELECT", {}, ConnectionRefusedError("db down"))

    due = daemon.scheduler.jobs.due
    daemon.scheduler.jobs.due = down  # type: ignore[method-assign]
    await _until(lambda: daemon.supervisor.component("scheduler").state == "down", 5)
    ready, checks = await daemon.health.readiness()
    assert not ready and "OperationalError" in checks["scheduler"]["detail"], checks
    daemon.scheduler.jobs.due = due  # type: ignore[method-assign]
    await _until(lambda: daemon.supervisor.component("scheduler").state == "up", 5)
