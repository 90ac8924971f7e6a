"""Fuzz: hypothesis-generated Telegram updates (missing fields, wrong types, huge text, odd
unicode, unknown update kinds) never crash the connector and never cost the next valid
message its answer.

One daemon + fake server serve every example: they run on their own event loop in a
thread (hypothesis drives a synchronous test), each example pushes its updates and then a
valid marker message, and waits for the marker's answer.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bots.testing.telegram import FakeTelegramServer
from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import CHAT, CHAT2, TOKEN, Stack, binding, echo, finals, store_url_for

# -- strategies -------------------------------------------------------------------------------

_weird_text = st.one_of(
    st.text(max_size=200),
    st.text(alphabet=st.sampled_from("\u200b\u202e\ufeff\x00\n\t🧪👩‍👩‍👧𝔘ẞ@/<>&\"'"),
            max_size=80),
    st.sampled_from(["x" * 5000, "y" * 30000, "@geode_bot " + "🎉" * 4000]),
    st.builds(lambda t: "@geode_bot " + t, st.text(max_size=60)),
    st.builds(lambda t: "/" + t, st.sampled_from(["status", "help", "stop@geode_bot",
                                                  "new@other_bot", "unknown", ""])),
)
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True), st.text(max_size=20))
_id = st.one_of(st.integers(-2**63, 2**63), st.sampled_from([CHAT, 42, 0, -1]), _scalar)
_user = st.one_of(
    _scalar,
    st.fixed_dictionaries({}, optional={"id": _id, "is_bot": _scalar,
                                        "first_name": _weird_text, "username": _scalar}),
    st.sampled_from([{"id": 42, "is_bot": False, "first_name": "A"},
                     {"id": 123456, "is_bot": True, "first_name": "Geode"}]),
)
_chat = st.one_of(
    _scalar,
    st.fixed_dictionaries({}, optional={"id": _id, "type": st.one_of(
        st.sampled_from(["private", "group", "supergroup", "channel"]), _scalar),
        "is_forum": _scalar}),
    st.just({"id": CHAT, "type": "supergroup"}),
)
_entity = st.fixed_dictionaries({}, optional={
    "type": st.one_of(st.sampled_from(["mention", "bot_command", "text_mention", "url"]),
                      _scalar),
    "offset": _id, "length": _id, "user": _user})
_message = st.fixed_dictionaries({}, optional={
    "message_id": _id, "date": _id, "chat": _chat, "from": _user, "text": _weird_text,
    "caption": _weird_text, "entities": st.one_of(_scalar, st.lists(_entity, max_size=4)),
    "reply_to_message": st.one_of(_scalar, st.fixed_dictionaries(
        {}, optional={"message_id": _id, "from": _user, "text": _weird_text, "chat": _chat})),
    "message_thread_id": _id, "is_topic_message": _scalar, "sender_chat": _chat,
    "photo": st.one_of(_scalar, st.lists(st.dictionaries(st.text(max_size=8), _scalar,
                                                         max_size=3), max_size=3)),
    "document": st.one_of(_scalar, st.fixed_dictionaries(
        {}, optional={"file_id": _scalar, "file_size": _scalar, "file_name": _weird_text})),
    "edit_date": _id,
})
_VALID = {"date": 0, "chat": {"id": CHAT, "type": "supergroup"},
          "from": {"id": 42, "is_bot": False, "first_name": "A"}, "text": "@geode_bot hi"}


_mids = itertools.count(10**6)


def _near(drop: set[str], override: dict[str, Any], now: bool) -> dict[str, Any]:
    # a fresh id each time: hypothesis repeats small values, and a repeated (chat, id) is a
    # duplicate Telegram never sends (it would be skipped by the dedupe key, testing nothing)
    msg: dict[str, Any] = {"message_id": next(_mids), **_VALID,
                           "date": int(time.time()) if now else 0}
    for k in drop:
        msg.pop(k, None)
    msg.update(override)
    return {"message": msg}


# Mostly-valid messages in the bound chat (allowed sender, mention) with a few fields
# dropped or replaced: these reach the dispatcher, the sender policy and the model.
_near_valid = st.builds(
    _near,
    st.sets(st.sampled_from(["date", "text", "from"]), max_size=1),
    st.dictionaries(st.sampled_from(["text", "entities", "reply_to_message",
                                     "message_thread_id", "is_topic_message", "from",
                                     "caption", "photo", "document"]),
                    st.one_of(_weird_text, _scalar, st.just({"id": 99, "first_name": "Z"}),
                              st.lists(_entity, max_size=2)), max_size=3),
    st.booleans(),
)
_garbage = st.one_of(
    st.builds(lambda m: {"message": m}, _message),
    st.builds(lambda m: {"edited_message": m}, _message),
    st.builds(lambda m: {"channel_post": m}, _message),
    st.builds(lambda k, v: {k: v}, st.sampled_from(
        ["callback_query", "poll", "my_chat_member", "message_reaction", "business_message",
         "some_future_update_kind"]), st.one_of(_scalar, st.dictionaries(
             st.text(max_size=10), _scalar, max_size=4))),
    st.dictionaries(st.text(max_size=12), _scalar, max_size=4),
    st.builds(lambda m: {"message": m, "edited_message": m}, _message),
)


def _interleave(garbage: list[dict[str, Any]], near: list[dict[str, Any]]) -> list[Any]:
    pairs = itertools.zip_longest(garbage, near)
    return [u for pair in pairs for u in pair if u is not None]


# every example mixes both kinds (a plain one_of lets hypothesis favour one branch)
_batch = st.builds(_interleave, st.lists(_garbage, max_size=3),
                   st.lists(_near_valid, min_size=1, max_size=2))


# -- one stack on a background loop -------------------------------------------------------------


class _Harness:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.home = Path(tempfile.mkdtemp(prefix="gbf-", dir="/tmp"))
        self.fake = FakeTelegramServer(token=TOKEN, bot_username="geode_bot")
        self.stack: Stack | None = None
        self.markers = 0

    def run(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self) -> None:
        await self.fake.start()
        self.fake.add_chat(CHAT)  # the fuzzed messages' chat exists: replies can land
        self.stack = Stack(home=self.home, fake=self.fake,
                           provider=ScriptedProvider([echo], repeat_last=True),
                           bindings=[binding(CHAT), binding(CHAT2)],
                           store_url=store_url_for(self.home))
        await self.stack.start()

    async def _stop(self) -> None:
        if self.stack is not None:
            await self.stack.stop()
        await self.fake.stop()

    def __enter__(self) -> _Harness:
        self.thread.start()
        self.run(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.run(self._stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()
            shutil.rmtree(self.home, ignore_errors=True)

    async def example(self, updates: list[dict[str, Any]]) -> None:
        for u in updates:
            self.fake.push_update(u)
        self.markers += 1
        marker = f"marker {self.markers}"
        self.fake.user_says(CHAT2, f"@geode_bot {marker}", from_user=42)
        await self.fake.wait_until(lambda: finals(self.fake, f"answer to: {marker}"), within=20)
        assert len(finals(self.fake, f"answer to: {marker}")) == 1
        conn = self.stack.connector  # type: ignore[union-attr]
        assert conn is not None and conn._main is not None and not conn._main.done()
        pump = conn.layer.pump.task  # type: ignore[union-attr]
        assert pump is not None and not pump.done()


@pytest.fixture(scope="module")
def harness() -> Iterator[_Harness]:
    with _Harness() as h:
        yield h


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(_batch)
def test_generated_updates_never_crash_the_connector_nor_lose_the_next_message(
    harness: _Harness, updates: list[dict[str, Any]]
) -> None:
    harness.run(harness.example(updates))


def test_the_intake_kept_running_through_all_examples(harness: _Harness) -> None:
    # a valid message after the whole fuzz run is still answered, once, by the same poller
    harness.run(harness.example([]))
    polls = harness.fake.calls_to("getUpdates")
    assert polls and all(c.status == 200 for c in polls)
    assert harness.markers == 41  # every example ran and got its marker answered
    assert not harness.fake.pending_updates  # nothing left unconfirmed (nor stuck)
