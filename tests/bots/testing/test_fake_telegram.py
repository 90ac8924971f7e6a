"""The fake Telegram Bot API, proven with the real python-telegram-bot."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from telegram import Bot, ReplyParameters, Update
from telegram.error import BadRequest, Conflict, InvalidToken, NetworkError, RetryAfter
from telegram.ext import (
    AIORateLimiter,
    Application,
    ApplicationBuilder,
    BaseRateLimiter,
    ContextTypes,
    MessageHandler,
    Updater,
    filters,
)

from bots.testing.telegram import FakeTelegramServer, TelegramEntityError, parse_telegram_html
from geode.testing.loopback import serve_app

TOKEN = "123456:ABC-fake-token"
GROUP = -1001234
OTHER = -1005678


@pytest.fixture(autouse=True)
def _ptb_timedelta(monkeypatch: pytest.MonkeyPatch) -> None:
    # PTB 22 warns (an error here) on every RetryAfter unless timedelta values are opted in.
    monkeypatch.setenv("PTB_TIMEDELTA", "1")


@pytest.fixture
async def srv() -> AsyncIterator[FakeTelegramServer]:
    async with FakeTelegramServer(token=TOKEN, bot_username="geode_bot") as server:
        yield server


def _bot(srv: FakeTelegramServer, token: str = TOKEN) -> Bot:
    return Bot(token, base_url=srv.base_url, base_file_url=srv.base_file_url)


async def _echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    msg = update.effective_message
    assert msg is not None and msg.text is not None
    await msg.reply_text(f"echo: {msg.text}", do_quote=True)


def _app(srv: FakeTelegramServer) -> Application[Any, Any, Any, Any, Any, Any]:
    builder = ApplicationBuilder().token(TOKEN).base_url(srv.base_url)
    app = builder.base_file_url(srv.base_file_url).concurrent_updates(True).build()
    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, _echo))
    return app


async def test_ptb_polling_application_replies_in_thread(srv: FakeTelegramServer) -> None:
    app = _app(srv)
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(poll_interval=0, timeout=2)
        try:
            topic = srv.create_topic(GROUP, "ops")
            update_id = srv.user_says(
                GROUP, "hello @geode_bot", from_user=42, message_thread_id=topic
            )
            await srv.wait_until(lambda: srv.sent)
        finally:
            await app.updater.stop()
            await app.stop()
    (reply,) = srv.sent
    assert reply.text == "echo: hello @geode_bot"
    assert reply.chat_id == GROUP
    assert reply.message_thread_id == topic
    assert reply.reply_to_message_id == srv.message_id_for(update_id)
    # PTB's final getUpdates on stop confirmed the offset: the update is gone for good.
    assert srv.pending_updates == []
    # The topic's service message, then the user's message and the bot's reply.
    assert [m.text for m in srv.messages_in(GROUP, message_thread_id=topic)] == [
        "",
        "hello @geode_bot",
        "echo: hello @geode_bot",
    ]
    # The mention entity was built as Telegram would, and PTB parsed it.
    user_msg = srv.all_updates[update_id]["message"]
    assert user_msg["entities"] == [{"type": "mention", "offset": 6, "length": 10}]
    assert {c.method for c in srv.calls} >= {"getMe", "getUpdates", "sendMessage"}


async def test_get_updates_offset_limit_and_long_poll(srv: FakeTelegramServer) -> None:
    async with _bot(srv) as bot:
        first = srv.user_says(GROUP, "one", from_user=1)
        second = srv.user_says(GROUP, "two", from_user=1)
        got = await bot.get_updates(limit=1)
        assert [u.update_id for u in got] == [first]
        got = await bot.get_updates(offset=first + 1)
        assert [u.update_id for u in got] == [second]
        # Confirmed updates are dropped for good: an older offset cannot bring them back.
        assert [u.update_id for u in await bot.get_updates(offset=first)] == [second]
        assert await bot.get_updates(offset=second + 1) == ()

        # A long poll returns as soon as an update arrives, not at its timeout.
        poll = asyncio.create_task(bot.get_updates(offset=second + 1, timeout=30))
        await srv.wait_until(lambda: len(srv.calls_to("getUpdates")) == 5)
        assert not poll.done()
        third = srv.user_says(GROUP, "three", from_user=1)
        got = await asyncio.wait_for(poll, 5)
        assert [(u.update_id, u.message.text if u.message else None) for u in got] == [
            (third, "three")
        ]


async def test_conflict_when_two_pollers(srv: FakeTelegramServer) -> None:
    async with _bot(srv) as first, _bot(srv) as second:
        earlier = asyncio.create_task(first.get_updates(timeout=30))
        await srv.wait_until(lambda: srv.calls_to("getUpdates"))
        later = asyncio.create_task(second.get_updates(timeout=30))
        with pytest.raises(Conflict, match="terminated by other getUpdates request"):
            await asyncio.wait_for(earlier, 5)
        srv.user_says(GROUP, "hi", from_user=1)
        assert len(await asyncio.wait_for(later, 5)) == 1
        assert [c.status for c in srv.calls_to("getUpdates")] == [409, 200]


async def test_two_ptb_updaters_see_conflict(srv: FakeTelegramServer) -> None:
    errors: list[Exception] = []

    async with _bot(srv) as bot_a, _bot(srv) as bot_b:
        updaters = [Updater(bot=b, update_queue=asyncio.Queue()) for b in (bot_a, bot_b)]
        for upd in updaters:
            await upd.initialize()
            await upd.start_polling(poll_interval=0, timeout=5, error_callback=errors.append)
        try:
            async with asyncio.timeout(10):
                while not errors:  # filled by PTB's polling loop, not by the server
                    await asyncio.sleep(0.01)
        finally:
            for upd in updaters:
                await upd.stop()
                await upd.shutdown()
    assert any(isinstance(e, Conflict) for e in errors)
    assert any(c.status == 409 for c in srv.calls_to("getUpdates"))


async def test_send_message_html_validation_and_replies(srv: FakeTelegramServer) -> None:
    srv.user_says(GROUP, "hi", from_user=7)
    async with _bot(srv) as bot:
        ok = await bot.send_message(GROUP, "<b>bold</b> &amp; <i>it</i>", parse_mode="HTML")
        assert ok.text == "bold & it"
        assert [(e.type, e.offset, e.length) for e in ok.entities] == [
            ("bold", 0, 4),
            ("italic", 7, 2),
        ]
        with pytest.raises(BadRequest, match=r"(?i)can't parse entities: unsupported start tag"):
            await bot.send_message(GROUP, "a <foo>b</foo>", parse_mode="HTML")
        with pytest.raises(BadRequest, match=r"(?i)can't find end tag corresponding to start tag"):
            await bot.send_message(GROUP, "<b>open", parse_mode="HTML")
        with pytest.raises(BadRequest, match=r"(?i)message is too long"):
            await bot.send_message(GROUP, "x" * 4097)
        with pytest.raises(BadRequest, match=r"(?i)message to be replied not found"):
            await bot.send_message(GROUP, "r", reply_parameters=ReplyParameters(message_id=999))
        with pytest.raises(BadRequest, match=r"(?i)chat not found"):
            await bot.send_message(424242, "nobody here")
        reply = await bot.send_message(GROUP, "re", reply_to_message_id=1)
        assert reply.reply_to_message is not None and reply.reply_to_message.text == "hi"
    # Rejected sends left no trace in what users see.
    assert [m.text for m in srv.messages_in(GROUP, from_bot=True)] == [
        "<b>bold</b> &amp; <i>it</i>",
        "re",
    ]


def test_html_parser_matches_telegram_rules() -> None:
    assert parse_telegram_html("AT&T &lt;3 &#128512;")[0] == "AT&T <3 😀"
    text, ents = parse_telegram_html('<a href="https://x.y">l</a><pre><code>c</code></pre>')
    assert text == "lc"
    assert ents[0] == {"type": "text_link", "offset": 0, "length": 1, "url": "https://x.y"}
    for bad in ("<b><i>x</b></i>", "</b>", "<span>x</span>", "<br>", "x <", "<b"):
        with pytest.raises(TelegramEntityError):
            parse_telegram_html(bad)


async def test_edit_delete_react_action_and_visible_state(srv: FakeTelegramServer) -> None:
    srv.user_says(GROUP, "question", from_user=7)
    async with _bot(srv) as bot:
        assert await bot.set_message_reaction(GROUP, 1, "👀")
        await bot.send_chat_action(GROUP, "typing")
        progress = await bot.send_message(GROUP, "working…")
        await bot.edit_message_text("final answer", GROUP, progress.message_id)
        with pytest.raises(BadRequest, match=r"(?i)message is not modified"):
            await bot.edit_message_text("final answer", GROUP, progress.message_id)
        extra = await bot.send_message(GROUP, "oops")
        assert await bot.delete_message(GROUP, extra.message_id)
        with pytest.raises(BadRequest, match=r"(?i)message to delete not found"):
            await bot.delete_message(GROUP, extra.message_id)
    visible = srv.messages_in(GROUP)
    assert [(m.from_bot, m.text, m.edits) for m in visible] == [
        (False, "question", 0),
        (True, "final answer", 1),
    ]
    assert visible[0].reactions == ["👀"]
    assert srv.chat_actions == [{"chat_id": GROUP, "action": "typing", "message_thread_id": None}]
    assert [(s.method, s.text) for s in srv.sent] == [
        ("sendMessage", "working…"),
        ("editMessageText", "final answer"),
        ("sendMessage", "oops"),
    ]
    assert srv.deleted == [(GROUP, extra.message_id)]


async def test_get_file_chat_and_member(srv: FakeTelegramServer) -> None:
    fid = srv.add_file(b"payload bytes", file_path="documents/a.txt")
    srv.user_says(
        GROUP, "", from_user=5, extra={"document": {"file_id": fid, "file_unique_id": "u"}}
    )
    async with _bot(srv) as bot:
        file = await bot.get_file(fid)
        assert file.file_path == f"{srv.base_file_url}{TOKEN}/documents/a.txt"
        assert bytes(await file.download_as_bytearray()) == b"payload bytes"
        chat = await bot.get_chat(GROUP)
        assert chat.id == GROUP and chat.type == "supergroup"
        member = await bot.get_chat_member(GROUP, 5)
        assert member.status == "member" and member.user.id == 5
        with pytest.raises(BadRequest, match=r"(?i)invalid file_id"):
            await bot.get_file("nope")


async def test_wrong_token_unknown_method_and_server_errors(srv: FakeTelegramServer) -> None:
    async with _bot(srv) as bot:
        srv.user_says(GROUP, "x", from_user=1)
        srv.fail_next("sendMessage", status=502)
        with pytest.raises(NetworkError, match="Bad Gateway"):
            await bot.send_message(GROUP, "a")
        srv.fail_next("sendMessage", status=500, apply_effect=True)
        with pytest.raises(NetworkError, match="Internal Server Error"):
            await bot.send_message(GROUP, "outcome unknown")
        # The failed-after-effect send is visible although the client saw an error.
        assert [m.text for m in srv.messages_in(GROUP, from_bot=True)] == ["outcome unknown"]
    with pytest.raises(InvalidToken):
        await Bot("999:wrong", base_url=srv.base_url).initialize()
    session = aiohttp.ClientSession()
    async with session, session.post(f"{srv.base_url}{TOKEN}/noSuchMethod") as resp:
        assert resp.status == 404
        assert (await resp.json())["description"] == "Not Found: method not found"


async def test_429_shape_and_per_chat_injection(srv: FakeTelegramServer) -> None:
    srv.add_chat(GROUP)
    srv.add_chat(OTHER)
    srv.fail_next("sendMessage", status=429, retry_after=3, chat_id=GROUP)
    async with _bot(srv) as bot:
        # The other chat is not affected by a failure scripted for GROUP.
        assert (await bot.send_message(OTHER, "b")).text == "b"
        with pytest.raises(RetryAfter) as info:
            await bot.send_message(GROUP, "a")
        assert info.value.retry_after.total_seconds() == 3
        assert (await bot.send_message(GROUP, "a")).text == "a"
    session = aiohttp.ClientSession()
    srv.fail_next("sendMessage", status=429, retry_after=5)
    async with (
        session,
        session.post(
            f"{srv.base_url}{TOKEN}/sendMessage", json={"chat_id": GROUP, "text": "z"}
        ) as resp,
    ):
        assert resp.status == 429
        assert await resp.json() == {
            "ok": False,
            "error_code": 429,
            "description": "Too Many Requests: retry after 5",
            "parameters": {"retry_after": 5},
        }


async def test_ptb_rate_limiter_honours_429_but_pauses_every_chat(srv: FakeTelegramServer) -> None:
    """AIORateLimiter retries after retry_after, and pauses *every* chat meanwhile.

    PTB documents that a RetryAfter halts all requests. This pins that behaviour: a send to
    another chat issued during the pause reaches the server only after the retry. A connector
    that must not block other chats needs a per-chat limiter (next test).
    """
    srv.add_chat(GROUP)
    srv.add_chat(OTHER)
    srv.fail_next("sendMessage", status=429, retry_after=1, chat_id=GROUP)
    limiter = AIORateLimiter(max_retries=2)
    app = ApplicationBuilder().token(TOKEN).base_url(srv.base_url).rate_limiter(limiter).build()
    async with app:
        first = asyncio.create_task(app.bot.send_message(GROUP, "slow chat"))
        async with asyncio.timeout(5):
            # PTB internals, read only to sequence the test: the pause has begun.
            while limiter._retry_after_event.is_set():
                await asyncio.sleep(0.005)
        second = asyncio.create_task(app.bot.send_message(OTHER, "other chat"))
        await asyncio.wait_for(asyncio.gather(first, second), 10)
    sends = [(c.params["chat_id"], c.status) for c in srv.calls_to("sendMessage")]
    assert sends == [(GROUP, 429), (GROUP, 200), (OTHER, 200)]
    assert [m.text for m in srv.messages_in(GROUP, from_bot=True)] == ["slow chat"]


class _PerChatRetryLimiter(BaseRateLimiter[int]):
    """Honours retry_after for the chat that got it only (what a connector needs)."""

    async def initialize(self) -> None:
        pass

    async def shutdown(self) -> None:
        pass

    async def process_request(  # type: ignore[override]
        self,
        callback: Callable[..., Coroutine[Any, Any, Any]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> Any:
        for attempt in range(3):
            try:
                return await callback(*args, **kwargs)
            except RetryAfter as exc:
                if attempt == 2:
                    raise
                await asyncio.sleep(exc.retry_after.total_seconds())  # type: ignore[union-attr]
        raise AssertionError("unreachable")


async def test_429_on_one_chat_does_not_block_another(srv: FakeTelegramServer) -> None:
    srv.add_chat(GROUP)
    srv.add_chat(OTHER)
    srv.fail_next("sendMessage", status=429, retry_after=1, chat_id=GROUP)
    app = ApplicationBuilder().token(TOKEN).base_url(srv.base_url)
    app = app.rate_limiter(_PerChatRetryLimiter()).build()
    async with app:
        first = asyncio.create_task(app.bot.send_message(GROUP, "slow chat"))
        await srv.wait_until(lambda: srv.calls_to("sendMessage"))
        await app.bot.send_message(OTHER, "other chat")
        # The other chat's reply arrived while the limited chat was still waiting.
        assert not first.done()
        await asyncio.wait_for(first, 10)
    sends = [(c.params["chat_id"], c.status) for c in srv.calls_to("sendMessage")]
    assert sends == [(GROUP, 429), (OTHER, 200), (GROUP, 200)]


async def test_webhook_mode_delivers_with_secret_and_retries(srv: FakeTelegramServer) -> None:
    received: list[tuple[str | None, dict[str, Any]]] = []
    refuse_first = [True]

    async def hook(request: web.Request) -> web.Response:
        received.append(
            (request.headers.get("X-Telegram-Bot-Api-Secret-Token"), await request.json())
        )
        if refuse_first[0]:
            refuse_first[0] = False
            return web.Response(status=500)
        return web.Response(status=200)

    hook_app = web.Application()
    hook_app.router.add_post("/hook", hook)
    async with serve_app(hook_app) as port:
        url = f"http://127.0.0.1:{port}/hook"
        async with _bot(srv) as bot:
            assert await bot.set_webhook(url, secret_token="s3cret")
            with pytest.raises(Conflict, match="webhook is active"):
                await bot.get_updates()
            uid = srv.user_says(GROUP, "via hook", from_user=3)
            await srv.wait_until(lambda: srv.pending_updates == [])
            assert [(u, s) for u, s in srv.webhook_deliveries] == [(uid, 500), (uid, 200)]
            assert all(secret == "s3cret" for secret, _ in received)
            assert received[-1][1]["message"]["text"] == "via hook"
            info = await bot.get_webhook_info()
            assert info.url == url and info.pending_update_count == 0
            assert await bot.delete_webhook()
            assert await bot.get_updates() == ()
            status, _ = await srv.deliver_webhook(url, {"message": {"text": "x"}}, "s3cret")
            assert status == 200
            assert received[-1][0] == "s3cret" and "update_id" in received[-1][1]


async def test_form_and_json_bodies_decode_alike(srv: FakeTelegramServer) -> None:
    srv.add_chat(GROUP)
    session = aiohttp.ClientSession()
    url = f"{srv.base_url}{TOKEN}/sendMessage"
    async with session:
        # PTB-style form: JSON-encoded values except plain strings ("123" text stays text).
        form = {"chat_id": str(GROUP), "text": "123", "message_thread_id": "5"}
        async with session.post(url, data=form) as resp:
            assert resp.status == 200
        body = {"chat_id": GROUP, "text": "json", "reply_markup": {"inline_keyboard": []}}
        async with session.post(
            url, data=json.dumps(body), headers={"Content-Type": "application/json"}
        ) as resp:
            assert resp.status == 200
    assert [(s.chat_id, s.text, s.message_thread_id) for s in srv.sent] == [
        (GROUP, "123", 5),
        (GROUP, "json", None),
    ]
    assert srv.sent[1].reply_markup == {"inline_keyboard": []}


async def test_commands_get_bot_command_entity(srv: FakeTelegramServer) -> None:
    uid = srv.user_says(GROUP, "/status@geode_bot now", from_user=9)
    ents = srv.all_updates[uid]["message"]["entities"]
    assert ents == [{"type": "bot_command", "offset": 0, "length": 17}]
    fuzz = srv.push_update({"weird": {"nested": [1, 2]}})
    async with _bot(srv) as bot:
        got = await bot.get_updates()
    assert [u.update_id for u in got] == [uid, fuzz]
