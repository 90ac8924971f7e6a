"""``/console`` in a chat: a direct message from someone who may sign in gets a one-time
link (for that platform user, rate-limited like the host's links); anyone else a plain
refusal; in a group the bot points to a direct message and never posts a link. Slack's
``/geode console`` answers in its ephemeral acknowledgement; Discord records a direct
message for this one command although it records no other unbound message."""

from __future__ import annotations

import re
import sqlite3
from typing import Any

import pytest

from bots.console.chat_command import IN_A_GROUP, console_command
from bots.store import ConsoleLinks, ConsoleSessions
from bots.store.console import MAX_LINKS_PER_WINDOW
from geode.settings import ConsoleSettings
from geode.store import Store
from tests.bots.conftest import CHAT, binding, settled

pytestmark = pytest.mark.timeout(60)

#: operator 7 (not in any binding); approver 43 of the bound group; 99 nobody
OPERATOR, APPROVER, STRANGER = 7, 43, 99


def _texts(fake: Any, chat: int) -> list[str]:
    return [m.plain_text for m in fake.messages_in(chat, from_bot=True)]


def _token(text: str) -> str:
    found = re.search(r"/signin\?token=([\w-]+)", text)
    assert found is not None, text
    return found.group(1)


async def _stack(make_stack: Any) -> Any:
    stack = make_stack(bindings=[binding(approve=["write_file"], approvers=[str(APPROVER)])])
    await stack.start()
    daemon = stack.daemon
    daemon.settings = daemon.settings.model_copy(update={"console": ConsoleSettings(
        enabled=True, listen="127.0.0.1:8788", operators=[f"telegram:{OPERATOR}"])})
    return stack


async def test_a_direct_message_gets_a_link_for_its_sender_and_a_group_never_does(
        make_stack: Any, fake: Any) -> None:
    stack = await _stack(make_stack)
    store = stack.daemon.database
    assert isinstance(store, Store)

    fake.user_says(OPERATOR, "/console", from_user=OPERATOR, chat_type="private")
    fake.user_says(APPROVER, "/console", from_user=APPROVER, chat_type="private")
    fake.user_says(STRANGER, "/console", from_user=STRANGER, chat_type="private")
    fake.user_says(CHAT, "/console", from_user=APPROVER)
    await fake.wait_until(lambda: all(_texts(fake, c) for c in
                                      (OPERATOR, APPROVER, STRANGER, CHAT)), within=15)
    await settled(stack)

    for user in (OPERATOR, APPROVER):
        [answer] = _texts(fake, user)
        assert answer.startswith("Your console sign-in link") and f"telegram:{user}" in answer
        assert "http://127.0.0.1:8788/signin?token=" in answer
        # the link signs its own sender in, once
        outcome = await ConsoleLinks(store=store).redeem(_token(answer))
        assert not isinstance(outcome, str)
        assert (outcome[0].platform, outcome[0].user_id) == ("telegram", str(user))
        assert await ConsoleLinks(store=store).redeem(_token(answer)) == "used"
    [refusal] = _texts(fake, STRANGER)
    assert "may not sign in" in refusal and "token=" not in refusal
    [pointer] = _texts(fake, CHAT)
    assert pointer == IN_A_GROUP
    assert len(await ConsoleSessions(store=store).list()) == 2
    # the link went straight to the chat: no outbox row keeps it (the group's pointer is
    # an ordinary notice)
    with sqlite3.connect(stack.home / "geode.db") as db:
        rows = [str(r) for r in db.execute("SELECT * FROM channel_outbox")]
    assert any("direct message" in r for r in rows)
    assert not any("token=" in r for r in rows)


async def test_links_by_direct_message_are_rate_limited_like_the_host_s(
        make_stack: Any, fake: Any) -> None:
    await _stack(make_stack)
    for _ in range(MAX_LINKS_PER_WINDOW + 1):
        fake.user_says(OPERATOR, "/console", from_user=OPERATOR, chat_type="private")
    await fake.wait_until(lambda: len(_texts(fake, OPERATOR)) == MAX_LINKS_PER_WINDOW + 1,
                          within=15)
    answers = _texts(fake, OPERATOR)
    assert sum("token=" in a for a in answers) == MAX_LINKS_PER_WINDOW
    assert "several sign-in links" in answers[-1] and "token=" not in answers[-1]


async def test_slack_s_geode_console_answers_in_a_dm_only(make_stack: Any, fake: Any) -> None:
    stack = await _stack(make_stack)
    daemon = stack.daemon
    daemon.settings = daemon.settings.model_copy(update={"console": ConsoleSettings(
        enabled=True, listen="127.0.0.1:8788", operators=["slack:U7"])})
    in_dm = await console_command(daemon, "slack", "U7", dm=True)
    assert "/signin?token=" in in_dm
    assert await console_command(daemon, "slack", "U7", dm=False) == IN_A_GROUP
    assert "may not sign in" in await console_command(daemon, "slack", "U8", dm=True)


class _Intake:
    async def binding_for(self, *_: Any) -> None:
        return None  # nothing is bound: a DM channel never is


async def test_discord_records_an_unbound_direct_message_only_when_it_is_console() -> None:
    from bots.discord._gateway import Link
    from bots.discord.inbound import DiscordInbound
    from bots.discord.options import DiscordOptions

    recorded: list[Any] = []

    async def submit(events: Any, *, cursor: Any = None) -> list[int]:
        recorded.extend(e for e, _ in events)
        return []

    link = Link(bot_id="900", parents={"500": "", "600": ""})
    inbound = DiscordInbound(link=link, options=DiscordOptions(), intake=_Intake,
                             submit=submit)

    def msg(mid: int, channel: str, text: str, guild: str | None = None) -> dict[str, Any]:
        data: dict[str, Any] = {"id": str(mid), "channel_id": channel, "content": text,
                                "type": 0, "author": {"id": "42", "username": "al"}}
        if guild is not None:
            data["guild_id"] = guild
        return data

    await inbound.ingest([msg(1001, "500", "hello"), msg(1002, "500", "/console"),
                          msg(1003, "600", "/console", guild="77")])
    assert [(e.channel, e.text, e.is_dm) for e in recorded] == [("500", "/console", True)]
