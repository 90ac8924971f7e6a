"""Slack intake: HTTP Events API signatures and url_verification, redeliveries, the double
message + app_mention delivery, ack-after-record, and the /geode command over HTTP."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from slack_helpers import (
    ALICE,
    BOT,
    CH,
    SlackStack,
    bot_messages,
    mention,
    quiescent,
    slack_binding,
    visible,
)

from bots.testing.slack import FakeSlack
from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import echo


@pytest.fixture
async def http_stack(home: Path, fake: FakeSlack) -> AsyncIterator[SlackStack]:
    stack = SlackStack(home=home, fake=fake, provider=ScriptedProvider([echo], repeat_last=True),
                       bindings=[slack_binding()], mode="http")
    await stack.start()
    yield stack
    await stack.stop()


@pytest.fixture
async def socket_stack(home: Path, fake: FakeSlack) -> AsyncIterator[SlackStack]:
    stack = SlackStack(home=home, fake=fake, provider=ScriptedProvider([echo], repeat_last=True),
                       bindings=[slack_binding()])
    await stack.start()
    yield stack
    await stack.stop()


async def _message(fake: FakeSlack, text: str) -> dict:
    """A stored post's ``message`` event, not delivered yet (the test delivers it)."""
    ts = await fake.user_posts(CH, text, user=ALICE, deliver=False)
    return {"type": "message", "user": ALICE, "text": text, "ts": ts, "channel": CH,
            "channel_type": "channel", "event_ts": ts, "team": fake.team_id}


async def test_bad_stale_and_missing_signatures_are_refused_and_not_recorded(http_stack, fake):
    url = http_stack.connector.events_url
    ev = await _message(fake, mention("forged"))
    bad = await fake.post_event(url, ev, bad_signature=True)
    stale = await fake.post_event(url, ev, timestamp=int(time.time()) - 600)
    missing = await fake.post_event(url, ev, missing_headers=True)
    wrong_secret = await fake.post_event(url, ev, signing_secret="not-the-secret")
    assert [r.status for r in (bad, stale, missing, wrong_secret)] == [401, 401, 401, 401]
    assert await http_stack.event_count() == 0
    # a correctly signed delivery of the same event is taken and answered
    ok = await fake.post_event(url, ev)
    assert ok.status == 200
    await fake.wait_until(lambda: visible(fake, "answer to: forged"), within=10)
    assert len(http_stack.provider.calls) == 1


async def test_url_verification_challenge_is_answered(http_stack, fake):
    challenge, result = await fake.post_url_verification(http_stack.connector.events_url)
    assert result.status == 200
    assert challenge in result.body
    forged = await fake.post_event(http_stack.connector.events_url,
                                   {"type": "url_verification", "challenge": "x"},
                                   bad_signature=True)
    assert forged.status == 401


async def test_http_retries_of_one_event_id_are_processed_once(http_stack, fake):
    url = http_stack.connector.events_url
    ev = await _message(fake, mention("retried"))
    first = await fake.post_event(url, ev, event_id="Ev0RETRY")
    again = await fake.post_event(url, ev, event_id="Ev0RETRY", retry_num=1)
    third = await fake.post_event(url, ev, event_id="Ev0RETRY", retry_num=2,
                                  retry_reason="http_error")
    assert [r.status for r in (first, again, third)] == [200, 200, 200]
    await fake.wait_until(lambda: visible(fake, "answer to: retried"), within=10)
    await quiescent(http_stack)
    assert len(visible(fake, "answer to: retried")) == 1
    assert len(http_stack.provider.calls) == 1
    assert await http_stack.event_count() == 1  # one row for the post


async def test_message_and_app_mention_of_one_post_give_one_reply_over_http(http_stack, fake):
    ts = await fake.user_posts(CH, mention("double"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: double"), within=10)
    kinds = [r.status for r in fake.http_deliveries]
    assert kinds == [200, 200]  # message and app_mention, both accepted
    await quiescent(http_stack)
    assert [m["text"] for m in bot_messages(fake, CH, thread=ts)] == ["answer to: double"]
    assert len(http_stack.provider.calls) == 1


async def test_http_slash_command_answers_ephemerally_and_in_thread(http_stack, fake):
    ts = await fake.user_posts(CH, mention("first"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: first"), within=10)
    result = await fake.slash_command("/geode", "status", CH, ALICE)
    assert not isinstance(result, str) and result.status == 200
    assert result.json()["response_type"] == "ephemeral"
    await fake.wait_until(lambda: any("session: slack:" in m["text"]
                                      for m in bot_messages(fake, CH, thread=ts)), within=10)


async def test_socket_redelivery_is_processed_once_and_acked(socket_stack, fake):
    ts = await fake.user_posts(CH, mention("once"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: once"), within=10)
    for envelope_id in list(fake.envelopes):
        await fake.redeliver(envelope_id, retry_num=1)
    await fake.wait_until(lambda: len(fake.acks) >= 4)
    # a drop mid-stream: the connection comes back (bolt reconnects) and keeps working
    await fake.disconnect_all(reason=None)
    await fake.wait_until(lambda: fake.connected > 0, within=10)
    await fake.user_posts(CH, mention("marker"), user=ALICE)
    await fake.wait_until(lambda: visible(fake, "answer to: marker"), within=10)
    await quiescent(socket_stack)
    assert [m["text"] for m in bot_messages(fake, CH, thread=ts)] == ["answer to: once"]
    assert len(socket_stack.provider.calls) == 2


async def test_ack_waits_for_the_record(home: Path, fake: FakeSlack):
    """An envelope whose record fails is not acked (Slack redelivers it), then answered."""
    failing = {"on": True}

    def fault(point: str) -> None:
        if point == "recorded" and failing["on"]:
            raise RuntimeError("store unavailable")

    stack = SlackStack(home=home, fake=fake, provider=ScriptedProvider([echo], repeat_last=True),
                       bindings=[slack_binding()], fault=fault)
    await stack.start()
    try:
        await fake.user_posts(CH, mention("not yet"), user=ALICE, extra={})
        await fake.wait_until(lambda: len(fake.deliveries) == 2)
        assert fake.unacked  # recording raised: no ack went out
        failing["on"] = False
        for envelope_id in list(fake.unacked):
            await fake.redeliver(envelope_id, retry_num=1)
        await fake.wait_until(lambda: visible(fake, "answer to: not yet"), within=10)
        await fake.wait_until(lambda: not fake.unacked)
    finally:
        await stack.stop()


async def test_own_messages_echoed_back_are_ignored(home: Path):
    async with FakeSlack(echo_bot_messages=True) as fake:
        fake.add_channel(CH)
        stack = SlackStack(home=home, fake=fake,
                           provider=ScriptedProvider([f"ping <@{BOT}> back"], repeat_last=True),
                           bindings=[slack_binding(allow_bots=True)])
        await stack.start()
        recorded: list[str] = []
        real = stack.connector.submit

        async def counted(events: Any, **kw: Any) -> Any:
            recorded.extend(ev.sender for ev, _status in events)
            return await real(events, **kw)

        stack.connector.submit = counted
        try:
            await fake.user_posts(CH, mention("hi"), user=ALICE)
            await fake.wait_until(lambda: visible(fake, PING), within=10)
            await fake.user_posts(CH, mention("marker"), user=ALICE)
            await fake.wait_until(lambda: len(visible(fake, PING)) == 2,
                                  within=10)
            # both progress messages came back (and were acknowledged)
            await fake.wait_until(lambda: len(_echoes(fake)) == 2 and not fake.unacked,
                                  within=10)
            assert len(stack.provider.calls) == 2  # the bot never answered itself
            # its own posts came back and cost no write (bolt's self-event filter drops
            # them before the record: a per-reply inbound write, claim and decision else)
            assert recorded == [ALICE, ALICE]
        finally:
            await stack.stop()


def _echoes(fake: FakeSlack) -> list[Any]:
    return [e for e in fake.envelopes.values()
            if e.get("payload", {}).get("event", {}).get("subtype") == "bot_message"]


#: the model's literal mention is escaped: an answer can never ping anybody
PING = f"ping &lt;@{BOT}&gt; back"


def test_slash_payload_parsing_helpers():
    from bots.slack._convert import parse_slash

    base = {"channel_id": CH, "user_id": ALICE, "trigger_id": "1.2"}
    link = "https://x.slack.com/archives/C0GEODE/p1700000000000100"
    assert parse_slash({**base, "text": f"stop {link}"}).thread == "1700000000.000100"
    assert parse_slash({**base, "text": "status 1700000000.000100"}).thread == \
        "1700000000.000100"
    assert parse_slash({**base, "text": ""}).name == "help"
    assert parse_slash({"text": "stop"}) is None
    assert parse_qs("a=1")  # urllib import is used by the fake's form bodies too


async def test_a_rejected_token_is_a_config_error_that_says_what_to_fix(home: Path, fake):
    from geode.errors import ConfigError

    stack = SlackStack(home=home, fake=fake, provider=ScriptedProvider([echo]),
                       bindings=[slack_binding()])
    fake.fail_next("auth.test", status=200, error="invalid_auth")
    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN"):
        await stack.start()
    await stack.stop()


def test_build_connectors_picks_socket_or_http_and_needs_a_way_in(home: Path):
    from bots import build_connectors
    from bots.slack import SlackConnector
    from geode.errors import ConfigError
    from geode.settings import load_settings

    def build(env: dict[str, str]) -> SlackConnector:
        settings, secrets = load_settings(env={"GEODE_HOME": str(home), **env},
                                          channels={"slack": {}})
        (connector,) = build_connectors(object(), settings, secrets)  # type: ignore[arg-type]
        assert isinstance(connector, SlackConnector)
        return connector

    both = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1",
            "SLACK_SIGNING_SECRET": "s"}
    assert build(both).mode == "socket"
    assert build({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"}).mode == "http"
    with pytest.raises(ConfigError, match=r"SLACK_APP_TOKEN.*SLACK_SIGNING_SECRET"):
        build({"SLACK_BOT_TOKEN": "xoxb-1"})
    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN"):
        build({"SLACK_APP_TOKEN": "xapp-1"})
