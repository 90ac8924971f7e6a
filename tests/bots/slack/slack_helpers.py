"""Slack test harness: a real ``Daemon`` (store, lanes, factory) hosting the real bolt-based
SlackConnector against the wire-level FakeSlack (Socket Mode or signed HTTP Events API)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _harness import DaemonHost, echo
from _harness import quiescent as quiescent  # the Slack tests import it from here
from sqlalchemy import func, select

from bots.slack import SlackConnector, SlackOptions
from bots.store._tables import events_table
from bots.testing.slack import FakeSlack
from geode.daemon import Daemon
from geode.providers.scripted import ScriptedProvider
from geode.settings import BindingSettings

TEAM = "T0FAKE"
CH = "C0GEODE"
CH2 = "C0OTHER"
ALICE = "U0ALICE"
BOB = "U0BOB"
STRANGER = "U0STRANGER"
BOT = "U0BOT"


def mention(text: str) -> str:
    return f"<@{BOT}> {text}"


def slack_binding(channel: str = CH, **kw: Any) -> BindingSettings:
    kw.setdefault("allow_users", [ALICE, BOB])
    return BindingSettings(platform="slack", channel=channel, **kw)


def sid(ts: str, channel: str = CH) -> str:
    return f"slack:{TEAM}:{channel}:{ts}"


@dataclass
class SlackStack(DaemonHost):
    """A daemon + Slack connector, restartable on the same home/store."""

    home: Path
    fake: FakeSlack
    provider: ScriptedProvider
    bindings: list[BindingSettings]
    mode: str = "socket"
    options: dict[str, Any] = field(default_factory=dict)
    fault: Callable[[str], None] | None = None
    daemon: Daemon | None = None
    connector: SlackConnector | None = None
    #: another store than the home's (replicas sharing one)
    store_url: str | None = None

    async def start(self) -> SlackConnector:
        daemon = self.new_daemon(store_url=self.store_url)
        opts = SlackOptions.model_validate({
            "base_url": self.fake.base_url, "progress_edit_interval_s": 0.0,
            "typing_interval_s": 30.0, "typing_delay_s": 0.0, "lease_ttl_s": 3.0,
            "pump_interval_s": 0.2,
            "http_port": 0, "mode": self.mode,
            # the suites written before streaming: today's progress message, sent at once
            "stream": False, "progress_after_ms": 0, **self.options,
        })
        self.connector = SlackConnector(
            host=daemon, bot_token=self.fake.bot_token,
            app_token=self.fake.app_token if self.mode == "socket" else None,
            signing_secret=self.fake.signing_secret, bindings=self.bindings, options=opts,
            fault=self.fault,
        )
        daemon.add_connector(self.connector)
        await daemon.start()
        if self.mode == "http":
            self.fake.events_url = self.connector.events_url
        else:
            await self.fake.wait_until(lambda: self.fake.connected > 0, within=5)
        return self.connector

    @property
    def layer(self) -> Any:
        assert self.connector is not None
        return self.connector.layer

    async def event_count(self) -> int:
        async with self.store.read() as conn:
            return int((await conn.execute(select(func.count()).select_from(events_table)))
                       .scalar_one())


def make(stacks: list[SlackStack], home: Path, fake: FakeSlack, **kw: object) -> SlackStack:
    """A stack on ``home`` (by default: echoing, one binding of ``CH``) that the test's
    ``stacks`` fixture stops at its end."""
    kw.setdefault("provider", ScriptedProvider([echo], repeat_last=True))
    kw.setdefault("bindings", [slack_binding()])
    s = SlackStack(home=home, fake=fake, **kw)  # type: ignore[arg-type]
    stacks.append(s)
    return s


def bot_messages(fake: FakeSlack, channel: str = CH, thread: str | None = None) -> list[dict]:
    """Visible messages of the bot: in one thread, or everywhere in the channel."""
    if thread is not None:
        msgs = fake.messages_in(channel, thread_ts=thread)
    else:
        roots = fake.messages_in(channel)
        msgs = [m for r in roots for m in fake.messages_in(channel, thread_ts=r["ts"])] or roots
        msgs = list({m["ts"]: m for m in msgs}.values())
    return [m for m in msgs if m.get("bot_id") == fake.bot_id]


def visible(fake: FakeSlack, text: str, channel: str = CH) -> list[dict]:
    return [m for m in bot_messages(fake, channel) if m["text"] == text]


def written(fake: FakeSlack, text: str) -> list[Any]:
    """chat.postMessage / chat.update calls that wrote ``text``."""
    return [p for p in fake.posts if p.text == text and p.method != "chat.delete"]


async def settle(predicate: Callable[[], Any], within: float = 10.0) -> None:
    """Wait for an async predicate."""
    async with asyncio.timeout(within):
        while not await predicate():
            await asyncio.sleep(0.02)

