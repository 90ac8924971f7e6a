"""/remind and /reminders in a Telegram thread, through the fake and a real daemon: a
reminder set in a thread runs its text as a turn there when due (once, or on a cron), is
listed and cancelled (by its creator or an approver only), refused forms say what works,
and one missed while the daemon was down fires once at the next start."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from bots.testing.telegram import FakeTelegramServer
from geode.daemon.scheduler import JobStore
from tests.bots.conftest import CHAT, binding, finals, settled


def _thread(mid: int) -> str:
    return f"telegram:123456:{CHAT}:{mid}"


async def _ask(fake: FakeTelegramServer, text: str, *, reply_to: int, user: int = 42,
               expect: str) -> str:
    before = len(fake.sent)
    fake.user_says(CHAT, text, from_user=user, reply_to=reply_to)

    def answered() -> list[str]:
        return [s.plain_text for s in fake.sent[before:] if expect in s.plain_text]

    await fake.wait_until(answered, within=10)
    return answered()[0]


async def _open_thread(stack: Any, fake: FakeTelegramServer) -> tuple[int, int]:
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot hello", from_user=42))
    await fake.wait_until(lambda: finals(fake, "answer to: hello"), within=10)
    return mid, fake.messages_in(CHAT, from_bot=True)[-1].message_id


async def test_a_reminder_runs_its_text_as_a_turn_in_the_thread_once(
    make_stack: Any, fake: FakeTelegramServer
) -> None:
    stack = make_stack(bindings=[binding()])
    mid, bot = await _open_thread(stack, fake)
    set_ = await _ask(fake, "/remind in 1s check the deploy", reply_to=bot, expect="Reminder")
    assert set_.startswith("⏰ Reminder rem-") and "once at " in set_ and "UTC" in set_
    await fake.wait_until(lambda: finals(fake, "answer to: check the deploy"), within=15)
    await settled(stack)
    # it ran in the thread's session, and once: fired, disabled, nothing left to list
    assert len(finals(fake, "answer to: check the deploy")) == 1
    jobs = await JobStore(store=stack.store).list()
    assert [(j.thread, j.once, j.enabled, j.last_status) for j in jobs] == [
        (_thread(mid), True, False, "fired")]
    listed = await _ask(fake, "/reminders", reply_to=bot, expect="reminders")
    assert listed == "No reminders in this thread. /remind WHEN WHAT sets one."


async def test_reminders_are_listed_and_cancelled_by_their_creator_or_an_approver(
    make_stack: Any, fake: FakeTelegramServer
) -> None:
    stack = make_stack(bindings=[binding(allow_users=["42", "43", "44"], approvers=["44"])])
    _mid, bot = await _open_thread(stack, fake)
    first = await _ask(fake, "/remind every day 09:00 post the standup notes", reply_to=bot,
                       expect="Reminder")
    assert "cron '0 9 * * *' (UTC)" in first
    second = await _ask(fake, '/remind cron "30 8 * * 1-5" check the queue', reply_to=bot,
                        expect="Reminder")
    ids = [first.split()[2], second.split()[2]]
    listed = await _ask(fake, "/reminders", reply_to=bot, expect="Reminders of this thread")
    assert [line.split()[0] for line in listed.splitlines()[1:]] == ids
    assert "post the standup notes" in listed and "cron '30 8 * * 1-5'" in listed

    refused = await _ask(fake, f"/reminders cancel {ids[0]}", reply_to=bot, user=43,
                         expect=ids[0])
    assert refused == f"Only its creator or an approver of this channel may cancel {ids[0]}."
    assert await _ask(fake, f"/reminders cancel {ids[0]}", reply_to=bot, user=42,
                      expect=ids[0]) == f"Cancelled reminder {ids[0]}."
    assert await _ask(fake, f"/reminders cancel {ids[1]}", reply_to=bot, user=44,
                      expect=ids[1]) == f"Cancelled reminder {ids[1]}."
    gone = await _ask(fake, f"/reminders cancel {ids[1]}", reply_to=bot, expect="No reminder")
    assert gone == f"No reminder {ids[1]} in this thread (/reminders lists them)."
    assert await JobStore(store=stack.store).list() == []


async def test_refused_forms_say_what_works(make_stack: Any, fake: FakeTelegramServer) -> None:
    stack = make_stack(bindings=[binding()])
    _mid, bot = await _open_thread(stack, fake)
    cases = {
        "/remind": "Use /remind WHEN WHAT",
        "/remind whenever you like do it": "I do not understand when.",
        "/remind in 5 fortnights do it": "Unknown unit 'fortnights'",
        '/remind cron "* * * * *" spam': "more often than every 5 minutes",
        "/remind in 1h /new": "not a command",
        "/remind 2001-01-01T09:00 too late": "That time has passed",
        "/remind tomorrow 25:00 nope": "is not a time of day",
        "/remind in 10m": "What should I do then?",
    }
    for text, expect in cases.items():
        assert expect in await _ask(fake, text, reply_to=bot, expect=expect.split()[0])
    assert await JobStore(store=stack.store).list() == []


async def test_the_most_a_thread_may_hold(make_stack: Any, fake: FakeTelegramServer) -> None:
    from bots.reminders import MAX_PER_THREAD

    stack = make_stack(bindings=[binding()])
    _mid, bot = await _open_thread(stack, fake)
    for i in range(MAX_PER_THREAD):
        await _ask(fake, f"/remind in {i + 2}h task {i}", reply_to=bot, expect="Reminder")
    refused = await _ask(fake, "/remind in 1h one more", reply_to=bot, expect="most it may")
    assert refused.startswith(f"This thread has {MAX_PER_THREAD} reminders already")
    assert len(await JobStore(store=stack.store).list()) == MAX_PER_THREAD


async def test_a_reminder_missed_while_down_fires_once_at_start(
    make_stack: Any, fake: FakeTelegramServer
) -> None:
    stack = make_stack(bindings=[binding()])
    _mid, bot = await _open_thread(stack, fake)
    await _ask(fake, "/remind in 2s while you were away", reply_to=bot, expect="Reminder")
    await settled(stack)
    await stack.stop()
    time.sleep(3)  # due while nobody serves
    assert not finals(fake, "answer to: while you were away")
    await stack.start()
    await fake.wait_until(lambda: finals(fake, "answer to: while you were away"), within=15)
    await settled(stack)
    assert len(finals(fake, "answer to: while you were away")) == 1


async def test_geode_schedule_list_shows_a_reminders_thread(
    make_stack: Any, fake: FakeTelegramServer, monkeypatch: Any
) -> None:
    from typer.testing import CliRunner

    from geode.cli import cmd_schedule  # noqa: F401 - registers its commands
    from geode.cli.app import app
    from geode.logging import configure_logging

    stack = make_stack(bindings=[binding()])
    mid, bot = await _open_thread(stack, fake)
    set_ = await _ask(fake, "/remind every weekday 08:30 read the alerts", reply_to=bot,
                      expect="Reminder")
    await settled(stack)
    await stack.stop()
    monkeypatch.setenv("GEODE_HOME", str(stack.home))
    monkeypatch.delenv("GEODE_STORE__URL", raising=False)
    # the command runs its own event loop: in a thread, beside this test's
    result = await asyncio.to_thread(CliRunner().invoke, app, ["schedule", "list"])
    configure_logging(stream=sys.stderr)  # it configured logging onto the runner's stderr
    out = result.output
    assert result.exit_code == 0, (out, result.exception)
    assert f"{set_.split()[2]}  '30 8 * * 1-5'  next " in out
    assert "'read the alerts'" in out
    assert f"reminder in binding telegram {CHAT}, thread {mid}  by 42" in out


def _scheduling(args: dict[str, str]) -> object:
    """A turn that calls ``schedule(**args)`` and answers ``result: <what it said>``; a turn
    that is no reminder's (the user's first message) does; a reminder's text is echoed."""
    from geode.providers.scripted import ToolCall
    from tests.bots._files import tool_results
    from tests.bots.conftest import last_user_text

    def step(request: Any) -> object:
        results = tool_results(request)
        if results:
            return "result: " + " | ".join(results)
        if "ping the oncall" in last_user_text(request):
            return "answer to: ping the oncall"
        return ToolCall("schedule", args)

    return step


async def test_the_schedule_tool_sets_a_reminder_that_fires_in_the_thread(
    make_stack: Any, fake: FakeTelegramServer
) -> None:
    from geode.providers.scripted import ScriptedProvider

    provider = ScriptedProvider(
        [_scheduling({"action": "create", "when": "in 1s", "text": "ping the oncall"})],
        repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding(tools=["schedule"])])
    await stack.start()
    mid = fake.message_id_for(fake.user_says(CHAT, "@geode_bot remind me", from_user=43))
    await fake.wait_until(lambda: [s for s in fake.sent
                                   if s.plain_text.startswith("result: ")],
                          within=10)
    set_ = [s.plain_text for s in fake.sent if s.plain_text.startswith("result: ")]
    assert set_[0].startswith("result: reminder rem-"), set_
    assert "once at " in set_[0] and set_[0].endswith(" UTC")
    await fake.wait_until(lambda: finals(fake, "answer to: ping the oncall"), within=15)
    await settled(stack)
    (job,) = await JobStore(store=stack.store).list()
    # made by the sender of the turn that called it, in its thread; fired once
    assert (job.thread, job.created_by, job.once, job.enabled) == (_thread(mid), "43", True,
                                                                   False)
    assert len(finals(fake, "answer to: ping the oncall")) == 1


async def test_the_schedule_tool_is_denied_where_the_binding_does_not_list_it(
    make_stack: Any, fake: FakeTelegramServer
) -> None:
    from geode.providers.scripted import ScriptedProvider

    provider = ScriptedProvider(
        [_scheduling({"action": "create", "when": "in 1h", "text": "ping the oncall"})],
        repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding()])
    await stack.start()
    fake.user_says(CHAT, "@geode_bot remind me", from_user=42)
    await fake.wait_until(lambda: [s for s in fake.sent if s.plain_text.startswith("result:")],
                          within=10)
    (answer,) = [s.plain_text for s in fake.sent if s.plain_text.startswith("result:")]
    assert "reminder rem-" not in answer and "schedule" in answer
    assert await JobStore(store=stack.store).list() == []


async def test_the_schedule_tool_refuses_past_its_bounds(
    make_stack: Any, fake: FakeTelegramServer
) -> None:
    from geode.providers.scripted import ScriptedProvider

    provider = ScriptedProvider(
        [_scheduling({"action": "create", "when": 'cron "*/2 * * * *"', "text": "spam"})],
        repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding(tools=["schedule"])])
    await stack.start()
    fake.user_says(CHAT, "@geode_bot remind me", from_user=42)
    await fake.wait_until(lambda: [s for s in fake.sent if s.plain_text.startswith("result:")],
                          within=10)
    (answer,) = [s.plain_text for s in fake.sent if s.plain_text.startswith("result:")]
    assert "more often than every 5 minutes" in answer
    assert await JobStore(store=stack.store).list() == []


def test_the_command_menus_offer_remind_and_reminders() -> None:
    from bots.command_menu import menu

    for private in (True, False):
        names = [c.name for c in menu(private=private)]
        assert {"remind", "reminders"} <= set(names)
