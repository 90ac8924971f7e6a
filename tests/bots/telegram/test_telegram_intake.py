"""Telegram intake paths: webhook secret check, the single-poller lease, catch-up after
downtime, per-chat 429 back-off, and thread-context bootstrap."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

from sqlalchemy import func, select

from bots.store._tables import events_table
from bots.store.leases import Lease
from geode.providers.scripted import ScriptedProvider
from geode.store import open_store
from tests.bots.conftest import CHAT, CHAT2, TOKEN, binding, finals, last_user_text, store_url_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _event_count(store) -> int:
    async with store.read() as conn:
        return int((await conn.execute(select(func.count()).select_from(events_table)))
                   .scalar_one())


# -- webhook ----------------------------------------------------------------------------------


async def test_webhook_checks_the_secret_token_and_records_only_good_updates(make_stack, fake):
    port = _free_port()
    url = f"http://127.0.0.1:{port}/telegram"
    stack = make_stack(options={"mode": "webhook", "webhook_url": url, "webhook_port": port},
                       connector_kw={"webhook_secret": "s3cret-TOKEN_1"})
    await stack.start()
    assert fake.webhook_url == url and fake.webhook_secret == "s3cret-TOKEN_1"

    # Telegram (the fake) posts with the secret it was given: answered as usual.
    fake.user_says(CHAT, "@geode_bot via webhook", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: via webhook"), within=10)
    assert not fake.calls_to("getUpdates")  # webhook mode never polls
    recorded = await _event_count(stack.store)
    calls = len(stack.provider.calls)

    forged = {"message": {"message_id": 999, "date": int(time.time()), "text": "@geode_bot pwn",
                          "chat": {"id": CHAT, "type": "supergroup"},
                          "from": {"id": 42, "is_bot": False, "first_name": "A"}}}
    for secret in ("wrong", None, "s3cret-TOKEN_"):
        status, _ = await fake.deliver_webhook(url, forged, secret_token=secret)
        assert status in (401, 403)
    good = dict(forged, message={**forged["message"], "message_id": 1000,
                                 "text": "@geode_bot marker"})
    status, _ = await fake.deliver_webhook(url, good, secret_token="s3cret-TOKEN_1")
    assert status == 200
    await fake.wait_until(lambda: finals(fake, "answer to: marker"), within=10)
    assert await _event_count(stack.store) == recorded + 1  # only the authentic update
    assert len(stack.provider.calls) == calls + 1
    assert not finals(fake, "answer to: pwn")


# -- single poller ------------------------------------------------------------------------------


async def test_second_connector_on_the_same_token_waits_then_takes_over(make_stack, fake, home):
    first = make_stack()
    c1 = await first.start()
    home2 = home / "replica2"
    home2.mkdir()
    second = make_stack(store_url=store_url_for(home))  # same store, another GEODE_HOME
    second.home = home2
    c2 = await second.start()
    await fake.wait_until(lambda: c2.standby, within=10)

    fake.user_says(CHAT, "@geode_bot while both run", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: while both run"), within=10)
    await asyncio.sleep(0.3)  # a few more poll cycles of the holder
    polls = fake.calls_to("getUpdates")
    assert polls and all(c.status == 200 for c in polls)  # no 409 storm
    assert c2.polls == 0 and c1.polls > 0
    assert len(first.provider.calls) == 1 and len(second.provider.calls) == 0

    await first.stop()  # releases the lease: the standby takes over
    await fake.wait_until(lambda: not c2.standby and c2.polls > 0, within=10)
    fake.user_says(CHAT, "@geode_bot after takeover", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: after takeover"), within=10)
    assert len(second.provider.calls) == 1
    assert len(finals(fake, "answer to: while both run")) == 1
    assert all(c.status == 200 for c in fake.calls_to("getUpdates"))


async def test_lease_is_taken_over_only_after_it_expires(home: Path):
    async with await open_store(store_url_for(home)) as store:
        a = Lease(store=store, name="telegram:1", owner="a", ttl_s=0.3)
        b = Lease(store=store, name="telegram:1", owner="b", ttl_s=0.3)
        assert await a.try_acquire()
        assert not await b.try_acquire()
        assert await a.try_acquire()  # renewal by the holder
        assert (await b.holder())[0] == "a"
        await asyncio.sleep(0.4)  # a stops renewing (crashed)
        assert await b.try_acquire()
        assert not await a.try_acquire()  # the old holder learns it lost the lease
        await b.release()
        assert await a.try_acquire()


# -- catch-up ----------------------------------------------------------------------------------


async def test_messages_sent_while_down_are_all_answered_in_order(make_stack, fake):
    stack = make_stack(options={"catch_up_max_age_s": 3600})
    await stack.start()
    warm = fake.message_id_for(fake.user_says(CHAT, "@geode_bot warm", from_user=42))
    await fake.wait_until(lambda: finals(fake, "answer to: warm"), within=10)
    await stack.stop()

    # Downtime: two threads, follow-ups in each, and one message too old to answer.
    a1 = fake.message_id_for(fake.user_says(CHAT, "@geode_bot a1", from_user=42))
    b1 = fake.message_id_for(fake.user_says(CHAT, "@geode_bot b1", from_user=43))
    fake.user_says(CHAT, "a2", from_user=42, reply_to=a1)
    fake.user_says(CHAT, "b2", from_user=43, reply_to=b1)
    fake.user_says(CHAT, "a3", from_user=43, reply_to=a1)
    fake.user_says(CHAT, "warm again", from_user=42, reply_to=warm)
    fake.user_says(CHAT, "@geode_bot ancient", from_user=42, date=int(time.time()) - 7200)
    calls_before = len(stack.provider.calls)

    await stack.start()
    wanted = ["a1", "a2", "a3", "b1", "b2", "warm again"]
    await fake.wait_until(lambda: all(finals(fake, f"answer to: {w}") for w in wanted),
                          within=20)
    texts = [s.plain_text for s in fake.sent]

    def first(w: str) -> int:
        return texts.index(f"answer to: {w}")

    assert first("a1") < first("a2") < first("a3")
    assert first("b1") < first("b2")
    for w in wanted:
        assert len(finals(fake, f"answer to: {w}")) == 1
    assert not finals(fake, "answer to: ancient")
    assert len(stack.provider.calls) - calls_before == len(wanted)
    # follow-ups joined their thread's session, in order
    sid = f"telegram:123456:{CHAT}:{a1}"
    restored = await stack.store.checkpointer(sid).load()
    said = [m.text.rsplit("): ", 1)[-1] for m in restored.messages
            if m.role == "user" and m.text]
    assert said == ["a1", "a2", "a3"]


# -- 429 on one chat --------------------------------------------------------------------------


async def test_429_on_one_chat_does_not_hold_up_another(make_stack, fake):
    stack = make_stack(bindings=[binding(CHAT), binding(CHAT2)])
    conn = await stack.start()
    fake.fail_next("sendMessage", status=429, retry_after=2, chat_id=CHAT)
    fake.user_says(CHAT, "@geode_bot slow chat", from_user=42)
    await fake.wait_until(lambda: any(c.status == 429 for c in fake.calls), within=10)
    fake.user_says(CHAT2, "@geode_bot fast chat", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: fast chat"), within=10)
    await fake.wait_until(lambda: finals(fake, "answer to: slow chat"), within=10)

    calls = fake.calls
    flood = next(i for i, c in enumerate(calls) if c.status == 429)
    assert str(calls[flood].params["chat_id"]) == str(CHAT)
    fast_final = next(i for i, c in enumerate(calls) if c.method == "editMessageText"
                      and c.params.get("text") == "answer to: fast chat")
    slow_retry = next(i for i, c in enumerate(calls) if i > flood and c.method == "sendMessage"
                      and str(c.params.get("chat_id")) == str(CHAT))
    # the other chat was answered completely while the flooded chat was held back
    assert flood < fast_final < slow_retry
    assert (str(CHAT), 2.0) in conn.rate_limiter.hits
    assert len(finals(fake, "answer to: slow chat")) == 1


# -- thread-context bootstrap ----------------------------------------------------------------------


async def test_mention_in_an_unseen_thread_gives_its_earlier_messages_to_the_model(
    make_stack, fake
):
    provider = ScriptedProvider(["ok"], repeat_last=True)
    stack = make_stack(provider=provider)
    await stack.start()
    # People talk without the bot; the bot records these (ignored: not addressed).
    x1 = fake.message_id_for(fake.user_says(CHAT, "the deploy failed at step 3", from_user=7))
    x2 = fake.message_id_for(fake.user_says(CHAT, "logs say disk full", from_user=8,
                                            reply_to=x1))
    fake.user_says(CHAT, "@geode_bot what should we do?", from_user=42, reply_to=x2)
    await fake.wait_until(lambda: finals(fake, "ok"), within=10)
    prompt = last_user_text(provider.calls[0])
    assert "[Earlier messages in this thread]" in prompt
    assert prompt.index("the deploy failed at step 3") < prompt.index("logs say disk full") \
        < prompt.index("what should we do?")
    # the session is the thread's (root = the first message of the reply chain)
    assert await stack.store.sessions.exists(f"telegram:123456:{CHAT}:{x1}")

    # A reply to a message the bot never received: the payload's quoted text is the context.
    unseen = {"message": {
        "message_id": 900, "date": int(time.time()), "text": "@geode_bot and this?",
        "entities": [{"type": "mention", "offset": 0, "length": 10}],
        "chat": {"id": CHAT, "type": "supergroup"},
        "from": {"id": 42, "is_bot": False, "first_name": "Ann"},
        "reply_to_message": {"message_id": 850, "date": int(time.time()) - 60,
                             "text": "an old message from before the bot joined",
                             "chat": {"id": CHAT, "type": "supergroup"},
                             "from": {"id": 9, "is_bot": False, "first_name": "Old"}},
    }}
    fake.push_update(unseen)
    await fake.wait_until(lambda: len(provider.calls) >= 2, within=10)
    prompt2 = last_user_text(provider.calls[1])
    assert "Old: an old message from before the bot joined" in prompt2
    assert prompt2.index("an old message") < prompt2.index("and this?")

    # A follow-up in a thread the bot already serves gets no context block again.
    fake.user_says(CHAT, "thanks", from_user=42, reply_to=x2)
    await fake.wait_until(lambda: len(provider.calls) >= 3, within=10)
    assert "[Earlier messages" not in last_user_text(provider.calls[2])
    assert TOKEN.startswith("123456:")


# -- pairing: the code and its message commit together -------------------------------------------


async def test_crash_right_after_issuing_a_pairing_code_still_delivers_it_once(make_stack, fake):
    from test_exactly_once import crash_at

    hit, fault = crash_at("pairing_issued")
    stack = make_stack(fault=fault)
    await stack.start()
    fake.user_says(CHAT, "@geode_bot let me in", from_user=99)
    await asyncio.wait_for(hit.wait(), 10)
    await stack.crash()
    assert not any("Pairing code" in s.plain_text for s in fake.sent)  # not sent yet
    stack.fault = None
    await stack.start()
    await fake.wait_until(lambda: any("Pairing code" in s.plain_text for s in fake.sent),
                          within=10)
    fake.user_says(CHAT, "@geode_bot again", from_user=99)  # same hour: no second code
    fake.user_says(CHAT, "@geode_bot marker", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: marker"), within=10)
    codes = [s.plain_text for s in fake.sent if "Pairing code" in s.plain_text]
    assert len(codes) == 1
    records = await stack.connector.layer.pairing.list()
    assert [r.code for r in records] == [codes[0].split("Pairing code: ")[1].split()[0]]
    assert len(stack.provider.calls) == 1  # only the marker reached the model
