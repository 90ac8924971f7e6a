"""Fuzz: hypothesis-generated Slack payloads (missing fields, wrong types, odd unicode,
unknown event types and subtypes, bad timestamps, stray mentions) are acknowledged without
crashing the intake, and the next valid message is still answered.

Hypothesis only generates the payloads (a synchronous ``@given`` collects them); one daemon
and one FakeSlack then take all of them through the real bolt Socket Mode path.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slack_helpers import ALICE, BOT, CH, CH2, STRANGER, SlackStack, mention, slack_binding, visible

from bots.testing.slack import FakeSlack
from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import echo

_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True), st.text(max_size=20))
_text = st.one_of(
    st.text(max_size=200),
    st.text(alphabet=st.sampled_from("\u200b\u202e\ufeff\x00\n\t🧪👩‍👩‍👧<>&|*_~`@!"),
            max_size=80),
    st.builds(lambda t: f"<@{BOT}> {t}", st.text(max_size=60)),
    st.sampled_from(["x" * 5000, "<!channel> <!here>", "/geode stop", f"<@{BOT}>"]),
    _scalar,
)
_ts = st.one_of(
    st.builds(lambda d: f"{time.time() - d:.6f}", st.floats(0, 3600)),
    st.sampled_from(["abc", "1.2.3", "", "99999999999999999.1", "1700000000"]),
    _scalar,
)
_inner = st.fixed_dictionaries({}, optional={
    "type": st.one_of(st.sampled_from(["message", "app_mention", "reaction_added",
                                       "member_joined_channel", ""]), _scalar),
    "channel": st.one_of(st.sampled_from([CH, CH2, "D0DM", "x" * 300]), _scalar),
    "user": st.one_of(st.sampled_from([ALICE, STRANGER, BOT, ""]), _scalar),
    "text": _text,
    "ts": _ts,
    "thread_ts": _ts,
    "subtype": st.one_of(st.sampled_from(["message_changed", "message_deleted", "bot_message",
                                          "channel_join", "thread_broadcast", "file_share"]),
                         _scalar),
    "bot_id": st.one_of(st.sampled_from(["B0BOT", "B0X"]), _scalar),
    "message": st.one_of(_scalar, st.fixed_dictionaries({
        "ts": _ts, "text": _text, "user": st.sampled_from([ALICE, BOT])})),
    "files": st.one_of(_scalar, st.lists(st.dictionaries(st.text(max_size=8), _scalar,
                                                         max_size=4), max_size=3)),
    "user_profile": st.one_of(_scalar, st.dictionaries(st.text(max_size=8), _scalar,
                                                       max_size=3)),
    "channel_type": st.one_of(st.sampled_from(["channel", "im", "group"]), _scalar),
})
_body = st.fixed_dictionaries({"type": st.just("event_callback")}, optional={
    "event": st.one_of(_inner, _scalar, st.lists(_scalar, max_size=3)),
    "event_id": st.one_of(st.text(max_size=300), _scalar),
})
_command = st.fixed_dictionaries({}, optional={
    "channel_id": st.one_of(st.sampled_from([CH, CH2]), _scalar),
    "user_id": st.one_of(st.sampled_from([ALICE, STRANGER]), _scalar),
    "text": st.one_of(st.sampled_from(["stop", "status 1.2", "new https://x/p17000000000001",
                                       "help", "bogus", ""]), _scalar),
    "trigger_id": st.one_of(st.text(max_size=200), _scalar),
    "user_name": _scalar,
})


def _collect() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    inner: list[dict[str, Any]] = []
    bodies: list[dict[str, Any]] = []
    commands: list[dict[str, Any]] = []

    @settings(max_examples=40, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(_inner, _body, _command)
    def collect(i: dict[str, Any], b: dict[str, Any], c: dict[str, Any]) -> None:
        inner.append(i)
        bodies.append(b)
        commands.append(c)

    collect()
    return inner, bodies, commands


async def test_fuzzed_payloads_never_crash_and_the_next_message_is_answered(home: Path):
    inner, bodies, commands = _collect()
    async with FakeSlack() as fake:
        fake.add_channel(CH)
        fake.add_channel(CH2)
        stack = SlackStack(home=home, fake=fake,
                           provider=ScriptedProvider([echo], repeat_last=True),
                           bindings=[slack_binding(), slack_binding(CH2, require_mention=False)])
        connector = await stack.start()
        try:
            for event in inner:  # through bolt's Socket Mode path, as Slack would send them
                await fake.deliver_event(event)
            for body in bodies:  # whole callbacks, malformed at the envelope level too
                await connector.intake_event(body)
            for command in commands:
                reply = await connector.intake_command(command)
                assert isinstance(reply, str) and reply
            await fake.user_posts(CH, mention("still here?"), user=ALICE)
            await fake.wait_until(lambda: visible(fake, "answer to: still here?"), within=20)
            # every fuzzed envelope was taken (recorded or marked) and acknowledged
            await fake.wait_until(lambda: not fake.unacked, within=10)
            assert stack.connector is not None and stack.connector.ready
        finally:
            await stack.stop()
