"""The aiohttp transport for python-telegram-bot (``bots.telegram.client``), driven through a
real PTB ``Bot`` against the wire-level fake Telegram server (and, for timeouts and headers, a
tiny local aiohttp server)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from aiohttp import web
from telegram import Bot, InputFile, ReplyParameters
from telegram.error import BadRequest, NetworkError, RetryAfter, TimedOut
from telegram.request import BaseRequest, HTTPXRequest

from bots.connector import DeliveryError
from bots.events import ReplyTarget
from bots.format import Chunk
from bots.telegram import TelegramConnector, TelegramOptions
from bots.telegram.client import AiohttpRequest, PerChatRateLimiter, build_request
from bots.telegram.connector import _Bot
from bots.testing.telegram import FakeTelegramServer
from tests.bots._walk import module_walk
from tests.bots.conftest import CHAT, TOKEN, finals


def _bot(base_url: str, request: BaseRequest, updates: BaseRequest | None = None) -> Bot:
    return Bot(TOKEN, base_url=base_url, request=request,
               get_updates_request=updates or AiohttpRequest())


@pytest.fixture
async def bot(fake: FakeTelegramServer) -> AsyncIterator[Bot]:
    fake.add_chat(CHAT)
    async with _bot(fake.base_url, AiohttpRequest(connection_pool_size=8)) as b:
        yield b


@dataclass
class _Seen:
    """One request as the local server saw it."""

    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class LocalApi:
    """A bare aiohttp server on loopback: records requests, answers via ``respond``."""

    respond: Callable[[web.Request], Awaitable[web.StreamResponse]]
    seen: list[_Seen] = field(default_factory=list)
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    runner: web.AppRunner | None = None
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(_Seen(path=request.path, headers=dict(request.headers),
                               body=await request.read()))
        self.entered.set()
        return await self.respond(request)

    async def __aenter__(self) -> LocalApi:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app, shutdown_timeout=0.1, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self.runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


async def _never_answers(request: web.Request) -> web.StreamResponse:
    await asyncio.Event().wait()  # cancelled when the client hangs up or the server stops
    raise AssertionError("unreachable")


async def _answers_a_message(request: web.Request) -> web.StreamResponse:
    message = {"message_id": 1, "date": 0, "chat": {"id": 7, "type": "private"}, "text": "x"}
    return web.json_response({"ok": True, "result": message})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- round trips --------------------------------------------------------------------------------


async def test_get_me_send_and_edit_round_trip(bot: Bot, fake: FakeTelegramServer):
    me = await bot.get_me()
    assert (me.id, me.username) == (123456, "geode_bot")

    sent = await bot.send_message(CHAT, "héllo <b>wörld</b> & co", parse_mode="HTML",
                                  message_thread_id=None)
    assert sent.text == "héllo wörld & co" and sent.chat.id == CHAT
    edited = await bot.edit_message_text("<i>second</i> draft", chat_id=CHAT,
                                         message_id=sent.message_id, parse_mode="HTML")
    assert not isinstance(edited, bool) and edited.text == "second draft"

    assert [(s.method, s.message_id, s.text) for s in fake.sent] == [
        ("sendMessage", sent.message_id, "héllo <b>wörld</b> & co"),
        ("editMessageText", sent.message_id, "<i>second</i> draft"),
    ]
    assert [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)] == ["second draft"]
    send_call = next(c for c in fake.calls if c.method == "sendMessage")
    assert send_call.params["chat_id"] == CHAT  # a JSON-encoded int, decoded by the fake


async def test_plain_requests_are_one_json_body_with_ptb_user_agent():
    async with LocalApi(respond=_answers_a_message) as api, AiohttpRequest() as request:
        bot = _bot(api.base_url, request)
        message = await bot.send_message(7, "a b&c=d ü", reply_parameters=ReplyParameters(3),
                                         disable_notification=True)
    assert message.message_id == 1
    seen = [s for s in api.seen if s.path.endswith("/sendMessage")]
    assert len(seen) == 1
    assert seen[0].headers["Content-Type"] == "application/json"
    assert seen[0].headers["User-Agent"] == BaseRequest.USER_AGENT
    # Values keep their JSON types (PTB's form would send each one JSON-encoded as a string).
    assert json.loads(seen[0].body) == {
        "chat_id": 7, "text": "a b&c=d ü", "disable_notification": True,
        "reply_parameters": {"message_id": 3},
    }


# -- errors: PTB maps statuses, we map transport failures -----------------------------------------


async def test_429_surfaces_as_retry_after(bot: Bot, fake: FakeTelegramServer):
    fake.fail_next("sendMessage", status=429, retry_after=1, chat_id=CHAT)
    with pytest.raises(RetryAfter) as info:
        await bot.send_message(CHAT, "flooded")
    assert info.value.retry_after == timedelta(seconds=1)
    assert [c.status for c in fake.calls if c.method == "sendMessage"] == [429]
    assert not fake.sent
    await bot.send_message(CHAT, "after the wait")  # the failure was one-shot
    assert [s.text for s in fake.sent] == ["after the wait"]


async def test_400_surfaces_as_bad_request(bot: Bot, fake: FakeTelegramServer):
    with pytest.raises(BadRequest, match="Can't parse entities"):
        await bot.send_message(CHAT, "<b>unclosed", parse_mode="HTML")
    assert [c.status for c in fake.calls if c.method == "sendMessage"] == [400]
    assert not fake.sent


async def test_read_timeout_default_raises_timed_out():
    async with LocalApi(respond=_never_answers) as api:
        async with AiohttpRequest(read_timeout=0.1) as request:
            bot = _bot(api.base_url, request)
            with pytest.raises(TimedOut, match="SocketTimeoutError"):
                await bot.get_me()
        assert [s.path for s in api.seen] == [f"/bot{TOKEN}/getMe"]  # it was sent, then waited


async def test_per_call_read_timeout_overrides_an_unlimited_default():
    async with LocalApi(respond=_never_answers) as api:
        async with AiohttpRequest(read_timeout=None) as request:
            bot = _bot(api.base_url, request)
            with pytest.raises(TimedOut):
                await bot.get_me(read_timeout=0.1)
        assert len(api.seen) == 1


async def test_pool_timeout_raises_timed_out_without_sending():
    async with LocalApi(respond=_never_answers) as api:
        async with AiohttpRequest(connection_pool_size=1, read_timeout=None,
                                  pool_timeout=0.05, connect_timeout=0.05) as request:
            bot = _bot(api.base_url, request)
            holder = asyncio.create_task(bot.get_me())  # takes the only connection
            await api.entered.wait()
            with pytest.raises(TimedOut, match="pool"):
                await bot.get_me()
            assert len(api.seen) == 1  # the second request never reached the server
            holder.cancel()
            with pytest.raises(asyncio.CancelledError):
                await holder


async def test_connection_refused_raises_network_error():
    url = f"http://127.0.0.1:{_closed_port()}/bot"
    async with AiohttpRequest(connect_timeout=2.0) as request:
        bot = _bot(url, request)
        with pytest.raises(NetworkError, match=r"aiohttp\.ClientConnectorError") as info:
            await bot.get_me()
    assert not isinstance(info.value, TimedOut)


async def test_request_before_initialize_is_a_network_error(fake: FakeTelegramServer):
    bot = _bot(fake.base_url, AiohttpRequest())
    with pytest.raises(NetworkError, match="not initialized"):
        await bot.get_me()
    assert not fake.calls


# -- uploads -------------------------------------------------------------------------------------


async def test_file_upload_reaches_the_fake_as_multipart(bot: Bot, fake: FakeTelegramServer,
                                                         tmp_path: Path):
    # The fake records a file part only from multipart/form-data (and answers sendDocument
    # like Telegram since it simulates uploads): what matters is the wire.
    sent = await bot.send_document(CHAT, b"\x00binary\xffdata", filename="r\u00e9port 1.txt",
                                   caption="the report")
    assert sent.document is not None and sent.caption == "the report"
    path = tmp_path / "notes.txt"
    path.write_bytes(b"from a file handle")
    with path.open("rb") as fh:
        await bot.send_document(CHAT, InputFile(fh, filename="notes.txt",
                                                read_file_handle=False))

    docs = [c.params for c in fake.calls if c.method == "sendDocument"]
    assert docs == [
        {"chat_id": CHAT, "caption": "the report",
         "document": {"filename": "r\u00e9port 1.txt", "content": b"\x00binary\xffdata"}},
        {"chat_id": CHAT,
         "document": {"filename": "notes.txt", "content": b"from a file handle"}},
    ]


async def test_upload_to_a_method_that_succeeds(bot: Bot, fake: FakeTelegramServer):
    assert await bot.set_webhook("https://example.invalid/hook", certificate=b"PEM-BYTES",
                                 secret_token="s3cret")
    call = next(c for c in fake.calls if c.method == "setWebhook")
    assert call.status == 200
    assert call.params["certificate"]["content"] == b"PEM-BYTES"
    assert fake.webhook_url == "https://example.invalid/hook"
    assert fake.webhook_secret == "s3cret"
    assert await bot.delete_webhook()


# -- concurrency and lifecycle ---------------------------------------------------------------------


async def test_fifty_concurrent_sends_all_succeed(bot: Bot, fake: FakeTelegramServer):
    # 50 requests over a pool of 8: most wait for a pooled connection.
    texts = [f"concurrent {i}" for i in range(50)]
    messages = await asyncio.gather(*(bot.send_message(CHAT, t) for t in texts))
    assert [m.text for m in messages] == texts
    assert len({m.message_id for m in messages}) == 50
    assert sorted(s.text for s in fake.sent) == sorted(texts)
    assert all(c.status == 200 for c in fake.calls if c.method == "sendMessage")


async def test_shutdown_then_initialize_again(fake: FakeTelegramServer):
    fake.add_chat(CHAT)
    request = AiohttpRequest()
    bot = _bot(fake.base_url, request)
    await bot.initialize()
    await bot.send_message(CHAT, "first life")
    await bot.shutdown()
    with pytest.raises(NetworkError, match="not initialized"):
        await request.post(f"{fake.base_url}{TOKEN}/getMe")
    await request.shutdown()  # twice is fine

    await bot.initialize()
    try:
        await bot.send_message(CHAT, "second life")
    finally:
        await bot.shutdown()
    assert [s.text for s in fake.sent] == ["first life", "second life"]


async def test_concurrent_initialize_opens_one_session(fake: FakeTelegramServer):
    request = AiohttpRequest()
    await asyncio.gather(*(request.initialize() for _ in range(5)))
    session = request._session
    try:
        assert session is not None
        await request.initialize()
        assert request._session is session
    finally:
        await request.shutdown()
    assert session.closed


# -- timeouts mapping and backend choice ----------------------------------------------------------


def test_timeouts_map_defaults_overrides_and_none():
    request = AiohttpRequest(read_timeout=20.0, write_timeout=20.0, connect_timeout=5.0,
                             pool_timeout=30.0, media_write_timeout=60.0)
    d = BaseRequest.DEFAULT_NONE
    plain = request._timeout(d, d, d, d, files=False)
    assert (plain.sock_read, plain.sock_connect, plain.connect, plain.total) == (
        20.0, 5.0, 35.0, None)
    upload = request._timeout(d, d, d, d, files=True)
    assert (upload.sock_read, upload.connect, upload.total) == (20.0, 35.0, 35.0 + 60.0 + 20.0)
    override = request._timeout(1.5, 2.0, 0.5, 0.25, files=True)
    assert (override.sock_read, override.sock_connect, override.connect, override.total) == (
        1.5, 0.5, 0.75, 0.75 + 2.0 + 1.5)
    unlimited = request._timeout(None, None, None, d, files=True)
    assert (unlimited.sock_read, unlimited.sock_connect, unlimited.connect,
            unlimited.total) == (None, None, None, None)


def test_backend_option_chooses_the_request_class():
    assert TelegramOptions().http_backend == "aiohttp"
    assert isinstance(build_request("aiohttp", connection_pool_size=4), AiohttpRequest)
    httpx_request = build_request("httpx", connection_pool_size=4, read_timeout=7.0)
    assert isinstance(httpx_request, HTTPXRequest) and httpx_request.read_timeout == 7.0
    with pytest.raises(ValueError, match="http_backend"):
        TelegramOptions.model_validate({"http_backend": "requests"})


@pytest.mark.parametrize(("backend", "cls"), [("aiohttp", AiohttpRequest),
                                              ("httpx", HTTPXRequest)])
async def test_connector_answers_over_either_backend(make_stack, fake, backend, cls):
    stack = make_stack(options={"http_backend": backend})
    connector = await stack.start()
    assert connector.bot is not None and isinstance(connector.bot.request, cls)
    fake.user_says(CHAT, f"@geode_bot over {backend}", from_user=42)
    await fake.wait_until(lambda: finals(fake, f"answer to: over {backend}"), within=10)


# -- the connector's sendMessage / editMessageText (results kept as JSON) --------------------------


async def _answers_true(request: web.Request) -> web.StreamResponse:
    return web.json_response({"ok": True, "result": True})


async def _connector_on(base_url: str, request: AiohttpRequest) -> TelegramConnector:
    connector = TelegramConnector(host=None, token=TOKEN)  # type: ignore[arg-type]  # unused here
    connector.bot = _Bot(token=TOKEN, base_url=base_url, request=request)
    return connector


async def test_send_and_edit_wire_format(fake: FakeTelegramServer):
    fake.add_chat(CHAT)
    async with AiohttpRequest() as request:
        connector = await _connector_on(fake.base_url, request)
        target = ReplyTarget(channel=str(CHAT), thread_root="1")
        chunk = Chunk(formatted="<b>bold</b> text", fallback="bold text")
        mid = await connector.send(target, chunk)
        await connector.edit(target, mid, Chunk(formatted="<i>x</i>", fallback="x"), plain=True)
    send, edit = [c for c in fake.calls if c.method in ("sendMessage", "editMessageText")]
    assert send.params == {"chat_id": CHAT, "text": "<b>bold</b> text", "parse_mode": "HTML",
                           "link_preview_options": {"is_disabled": True}}
    assert edit.params == {"chat_id": CHAT, "message_id": int(mid), "text": "x",
                           "link_preview_options": {"is_disabled": True}}
    assert [m.plain_text for m in fake.messages_in(CHAT, from_bot=True)] == ["x"]


async def test_send_answered_without_a_message_id_is_unknown():
    async with LocalApi(respond=_answers_true) as api, AiohttpRequest() as request:
        connector = await _connector_on(api.base_url, request)
        target = ReplyTarget(channel="7", thread_root="1")
        with pytest.raises(DeliveryError) as info:
            await connector.send(target, Chunk(formatted="hi", fallback="hi"))
    assert info.value.kind == "unknown"  # it may be visible: reconcile, never blindly re-send


async def test_a_paced_send_walks_one_module_of_ours(fake: FakeTelegramServer):
    # the client, its pacing and its transport are one module: a send, an edit, a reaction
    # and "typing", paced by the rate limiter, enter bots.telegram.client and nothing else
    fake.add_chat(CHAT)
    target = ReplyTarget(channel=str(CHAT), thread_root="1")
    async with AiohttpRequest() as request:
        connector = TelegramConnector(host=None, token=TOKEN)  # type: ignore[arg-type]  # unused
        connector.bot = _Bot(token=TOKEN, base_url=fake.base_url, request=request,
                             rate_limiter=PerChatRateLimiter())
        await connector.send(target, Chunk(formatted="warm", fallback="warm"))  # first calls
        with module_walk() as walk:
            mid = await connector.send(target, Chunk(formatted="<b>a</b>", fallback="a"))
            await connector.edit(target, mid, Chunk(formatted="<b>b</b>", fallback="b"))
            await connector.react(target, mid, "👀")
            await connector.typing(target)
    assert [c.method for c in fake.calls][-4:] == [
        "sendMessage", "editMessageText", "setMessageReaction", "sendChatAction"]
    assert walk.modules == {"bots.telegram.client"}, sorted(walk.edges)
