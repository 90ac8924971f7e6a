"""The fake Slack, proven with the real slack_sdk and slack-bolt."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from bots.testing.slack import FakeSlack, sign_slack_request

CHANNEL = "C0GENERAL"
SECRET = "test-signing-secret"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(signing_secret=SECRET) as server:
        yield server


def _client(slack: FakeSlack, token: str | None = None) -> AsyncWebClient:
    return AsyncWebClient(token=token or slack.bot_token, base_url=slack.base_url)


async def test_web_client_posts_updates_reacts_and_reads_back(slack: FakeSlack) -> None:
    root = await slack.user_posts(CHANNEL, "question", user="U1")
    client = _client(slack)
    auth = await client.auth_test()
    assert (auth["user_id"], auth["bot_id"]) == (slack.bot_user_id, slack.bot_id)
    await client.reactions_add(channel=CHANNEL, timestamp=root, name="eyes")
    with pytest.raises(SlackApiError) as dup:
        await client.reactions_add(channel=CHANNEL, timestamp=root, name="eyes")
    assert dup.value.response["error"] == "already_reacted"
    await client.assistant_threads_setStatus(channel_id=CHANNEL, thread_ts=root, status="working")
    progress = await client.chat_postMessage(channel=CHANNEL, text="working…", thread_ts=root)
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*done*"}}]
    await client.chat_update(channel=CHANNEL, ts=progress["ts"], text="done", blocks=blocks)
    extra = await client.chat_postMessage(channel=CHANNEL, text="oops", thread_ts=root)
    await client.chat_delete(channel=CHANNEL, ts=extra["ts"])

    assert [(p.method, p.text, p.thread_ts) for p in slack.posts] == [
        ("chat.postMessage", "working…", root),
        ("chat.update", "done", root),
        ("chat.postMessage", "oops", root),
        ("chat.delete", "oops", root),
    ]
    assert slack.posts[1].blocks == blocks
    assert slack.reactions == [{"channel": CHANNEL, "ts": root, "name": "eyes"}]
    assert slack.statuses == [{"channel_id": CHANNEL, "thread_ts": root, "status": "working"}]
    replies = await client.conversations_replies(channel=CHANNEL, ts=root)
    assert [m["text"] for m in replies["messages"]] == ["question", "done"]
    assert replies["messages"][0]["reply_count"] == 2
    assert replies["messages"][0]["reactions"][0]["name"] == "eyes"
    history = await client.conversations_history(channel=CHANNEL)
    assert [m["text"] for m in history["messages"]] == ["question"]  # replies stay in thread
    info = await client.conversations_info(channel=CHANNEL)
    assert info["channel"]["id"] == CHANNEL
    user = await client.users_info(user="U1")
    assert user["user"]["id"] == "U1"


async def test_web_api_errors_auth_and_unknowns(slack: FakeSlack) -> None:
    slack.add_channel(CHANNEL)
    with pytest.raises(SlackApiError) as bad:
        await _client(slack, "xoxb-nope").chat_postMessage(channel=CHANNEL, text="x")
    assert bad.value.response["error"] == "invalid_auth"
    with pytest.raises(SlackApiError) as wrong_type:
        await _client(slack, slack.app_token).chat_postMessage(channel=CHANNEL, text="x")
    assert wrong_type.value.response["error"] == "not_allowed_token_type"
    client = _client(slack)
    for call, error in [
        (client.chat_postMessage(channel="C404", text="x"), "channel_not_found"),
        (client.chat_update(channel=CHANNEL, ts="1.000001", text="x"), "message_not_found"),
        (client.users_info(user="U404"), "user_not_found"),
    ]:
        with pytest.raises(SlackApiError) as exc:
            await call
        assert exc.value.response["error"] == error
    slack.fail_next("assistant.threads.setStatus", status=200, error="missing_scope")
    with pytest.raises(SlackApiError) as scope:
        await client.assistant_threads_setStatus(channel_id=CHANNEL, thread_ts="1.0", status="x")
    assert scope.value.response["error"] == "missing_scope"
    assert slack.posts == []


async def test_history_and_replies_paginate_by_ts_window(slack: FakeSlack) -> None:
    stamps = [await slack.user_posts(CHANNEL, f"m{i}", user="U1", deliver=False) for i in range(5)]
    client = _client(slack)
    page = await client.conversations_history(channel=CHANNEL, oldest=stamps[1], limit=2)
    assert [m["text"] for m in page["messages"]] == ["m4", "m3"]
    assert page["has_more"] is True
    cursor = page["response_metadata"]["next_cursor"]
    rest = await client.conversations_history(
        channel=CHANNEL, oldest=stamps[1], limit=2, cursor=cursor
    )
    assert [m["text"] for m in rest["messages"]] == ["m2"]
    assert rest["has_more"] is False
    inclusive = await client.conversations_history(
        channel=CHANNEL, oldest=stamps[1], latest=stamps[2], inclusive=True
    )
    assert [m["text"] for m in inclusive["messages"]] == ["m2", "m1"]
    r1 = await slack.user_posts(CHANNEL, "r1", user="U2", thread_ts=stamps[0], deliver=False)
    await slack.user_posts(CHANNEL, "r2", user="U2", thread_ts=stamps[0], deliver=False)
    later = await client.conversations_replies(channel=CHANNEL, ts=stamps[0], oldest=r1)
    assert [m["text"] for m in later["messages"]] == ["m0", "r2"]
    assert slack.envelopes == {}  # deliver=False stored without delivering


async def test_rate_limit_honoured_by_sdk_retry_handler(slack: FakeSlack) -> None:
    slack.add_channel(CHANNEL)
    client = _client(slack)
    slack.fail_next("chat.postMessage", status=429, retry_after=0)
    with pytest.raises(SlackApiError) as exc:
        await client.chat_postMessage(channel=CHANNEL, text="no retry handler")
    assert exc.value.response.status_code == 429
    assert exc.value.response.headers["Retry-After"] == "0"
    assert exc.value.response["error"] == "ratelimited"

    client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=1))
    slack.fail_next("chat.postMessage", status=429, retry_after=0)
    resp = await client.chat_postMessage(channel=CHANNEL, text="retried")
    assert resp["ok"] and resp["ts"] == slack.posts[0].ts
    statuses = [c.status for c in slack.calls_to("chat.postMessage")]
    assert statuses == [429, 429, 200]
    assert [p.text for p in slack.posts] == ["retried"]


async def test_socket_mode_client_receives_envelope_and_acks(slack: FakeSlack) -> None:
    received: list[SocketModeRequest] = []
    ack_second = [False]

    async def listener(client: SocketModeClient, req: SocketModeRequest) -> None:
        received.append(req)
        if req.payload["event"]["text"] != "second" or ack_second[0]:
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

    sm = SocketModeClient(app_token=slack.app_token, web_client=_client(slack), ping_interval=1)
    sm.socket_mode_request_listeners.append(listener)
    await sm.connect()
    try:
        await slack.wait_until(lambda: slack.connected == 1)
        await slack.user_posts(CHANNEL, "first", user="U1")
        await slack.wait_until(lambda: slack.acks)
        (first,) = received
        assert first.type == "events_api"
        assert first.payload["type"] == "event_callback"
        assert first.payload["event"]["type"] == "message"
        assert slack.acks == [first.envelope_id]

        # Not acked ⇒ redelivered on demand with retry_attempt, then acked.
        await slack.user_posts(CHANNEL, "second", user="U1")
        await slack.wait_until(lambda: len(received) == 2)
        second_id = received[1].envelope_id
        assert slack.unacked == [second_id]
        ack_second[0] = True
        await slack.redeliver(second_id, retry_num=1)
        await slack.wait_until(lambda: second_id in slack.acks)
        assert received[2].envelope_id == second_id and received[2].retry_attempt == 1
        assert slack.unacked == []
    finally:
        await sm.close()


async def test_socket_mode_reconnect_redelivers_unacked(slack: FakeSlack) -> None:
    received: list[SocketModeRequest] = []
    acking = [False]

    async def listener(client: SocketModeClient, req: SocketModeRequest) -> None:
        received.append(req)
        if acking[0]:
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

    sm = SocketModeClient(app_token=slack.app_token, web_client=_client(slack), ping_interval=1)
    sm.socket_mode_request_listeners.append(listener)
    await sm.connect()
    try:
        await slack.wait_until(lambda: slack.connected == 1)
        await slack.user_posts(CHANNEL, "lost ack", user="U1")
        await slack.wait_until(lambda: received)
        acking[0] = True
        await slack.disconnect_all()  # graceful: a "disconnect" message, then close
        # slack_sdk opens a new connection; the unacked envelope comes back as a retry.
        await slack.wait_until(lambda: slack.acks, within=10)
        assert slack.connections_opened == 2
        assert [(r.envelope_id, r.retry_attempt) for r in received] == [
            (received[0].envelope_id, 0),
            (received[0].envelope_id, 1),
        ]
        # Events posted while nobody is connected wait for the next connection.
        await slack.disconnect_all(reason=None)
        await slack.wait_until(lambda: slack.connected == 0)
        queued = await slack.user_posts(CHANNEL, "while down", user="U1")
        await slack.wait_until(lambda: len(slack.acks) == 2, within=10)
        assert received[-1].payload["event"]["ts"] == queued
    finally:
        await sm.close()


def _bolt_app(slack: FakeSlack, seen: list[dict[str, Any]]) -> AsyncApp:
    app = AsyncApp(client=_client(slack), signing_secret=SECRET)

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], say: Any) -> None:
        seen.append(event)
        await say(text=f"on it: {event['text']}", thread_ts=event.get("thread_ts") or event["ts"])

    @app.event("message")
    async def on_message(event: dict[str, Any]) -> None:
        seen.append(event)

    @app.command("/geode")
    async def on_command(ack: Any, command: dict[str, Any]) -> None:
        await ack(f"status for {command['channel_id']}")

    return app


async def test_bolt_socket_mode_replies_in_thread_to_double_delivery(slack: FakeSlack) -> None:
    seen: list[dict[str, Any]] = []
    app = _bolt_app(slack, seen)
    handler = AsyncSocketModeHandler(app, slack.app_token)
    await handler.connect_async()
    try:
        await slack.wait_until(lambda: slack.connected == 1)
        ts = await slack.user_posts(CHANNEL, f"<@{slack.bot_user_id}> deploy", user="U1")
        await slack.wait_until(lambda: slack.posts and len(slack.acks) == 2)
        envelope_id = await slack.slash_command("/geode", "status", CHANNEL, "U1")
        await slack.wait_until(lambda: envelope_id in slack.acks)
    finally:
        await handler.close_async()
    # Slack sends both events for one top-level mention; the fake did, bolt acked both.
    assert sorted(e["type"] for e in seen) == ["app_mention", "message"]
    assert {e["ts"] for e in seen} == {ts}
    (post,) = slack.posts
    assert (post.method, post.channel, post.thread_ts) == ("chat.postMessage", CHANNEL, ts)
    assert post.text == f"on it: <@{slack.bot_user_id}> deploy"
    assert slack.ack_payloads[str(envelope_id)] == {"text": f"status for {CHANNEL}"}


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"


async def test_bolt_http_events_signed_and_verified(slack: FakeSlack) -> None:
    seen: list[dict[str, Any]] = []
    runner, url = await _serve(_bolt_app(slack, seen).web_app(path="/slack/events"))
    slack.events_url = url
    try:
        challenge, verified = await slack.post_url_verification(url)
        assert verified.status == 200 and challenge in verified.body

        root = await slack.user_posts(CHANNEL, "no mention", user="U1")
        ts = await slack.user_posts(
            CHANNEL, f"<@{slack.bot_user_id}> hi", user="U1", thread_ts=root
        )
        await slack.wait_until(lambda: slack.posts)
        assert [r.status for r in slack.http_deliveries[1:]] == [200, 200, 200]
        (post,) = slack.posts
        assert post.thread_ts == root  # a mention inside a thread is answered in that thread
        mention = next(e for e in seen if e["type"] == "app_mention")
        assert mention["ts"] == ts and mention["thread_ts"] == root

        event = {"type": "app_mention", "user": "U1", "text": "x", "ts": ts, "channel": CHANNEL}
        stale = int(time.time()) - 600
        for kwargs in ({"bad_signature": True}, {"timestamp": stale}, {"missing_headers": True}):
            rejected = await slack.post_event(url, event, **kwargs)  # type: ignore[arg-type]
            assert rejected.status == 401, kwargs
        retry = await slack.post_event(url, event, retry_num=1, event_id="EvSAME")
        assert retry.status == 200 and retry.event_id == "EvSAME"

        form = await slack.slash_command("/geode", "status", CHANNEL, "U1")
        assert not isinstance(form, str)
        assert (form.status, form.body) == (200, f"status for {CHANNEL}")
    finally:
        await runner.cleanup()
    # Rejected deliveries reached no listener: two messages, one mention, one retry.
    assert sorted(e["type"] for e in seen) == ["app_mention", "app_mention", "message", "message"]


def test_signature_matches_slack_documentation_example() -> None:
    # The worked example from Slack's "Verifying requests from Slack" guide.
    body = (
        "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id="
        "G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook"
        "-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F3977"
        "00885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d1"
        "0d2c447fce8b6703c"
    )
    assert (
        sign_slack_request("8f742231b10e8888abcd99yyyzzz85a5", "1531420618", body)
        == "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    )


async def test_mention_only_delivery_option(slack: FakeSlack) -> None:
    slack.double_delivery = False
    await slack.user_posts(CHANNEL, f"<@{slack.bot_user_id}> one", user="U1")
    await slack.user_posts("D0DM", f"<@{slack.bot_user_id}> dm", user="U1")
    kinds = [
        (e["payload"]["event"]["type"], e["payload"]["event"].get("channel_type"))
        for e in slack.envelopes.values()
    ]
    # No client connected: envelopes are queued; a DM never yields app_mention.
    assert kinds == [("app_mention", None), ("message", "im")]
    assert len(slack.unacked) == 2


async def test_chat_streaming_grows_one_message_until_stopped(slack: FakeSlack) -> None:
    """slack_sdk's chat.startStream / appendStream / stopStream against the fake."""
    root = await slack.user_posts(CHANNEL, "question", user="U1")
    client = _client(slack)
    started = await client.chat_startStream(channel=CHANNEL, thread_ts=root,
                                            markdown_text="Here ")
    await client.chat_appendStream(channel=CHANNEL, ts=started["ts"], markdown_text="is **it**")
    await client.chat_stopStream(channel=CHANNEL, ts=started["ts"], markdown_text=".")
    with pytest.raises(SlackApiError) as stopped:
        await client.chat_appendStream(channel=CHANNEL, ts=started["ts"], markdown_text="more")
    assert stopped.value.response["error"] == "message_not_in_streaming_state"
    assert [(p.method, p.text) for p in slack.posts] == [
        ("chat.startStream", "Here "), ("chat.appendStream", "Here is **it**"),
        ("chat.stopStream", "Here is **it**.")]
    replies = [m for m in slack.messages_in(CHANNEL, thread_ts=root) if m["ts"] == started["ts"]]
    assert [m["text"] for m in replies] == ["Here is **it**."]
