"""Reminders in a binding's time zone (``timezone = "Europe/Berlin"``): ``/remind`` reads times
of day, dates and crons there, the zone is stored with the reminder so a cron fires at its
local time across daylight saving (the scheduler's clock injected), ``/reminders`` and
``geode schedule list`` show local times with the zone, and a misspelt zone is exit 2 with
the close match."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bots.events import InboundEvent
from bots.reminders import ReminderError, ThreadReminders, When, describe, parse_when
from bots.testing.telegram import FakeTelegramServer
from geode.daemon.scheduler import JobStore, Scheduler
from geode.errors import ConfigError
from geode.settings import BindingSettings, load_settings
from geode.store import open_store
from tests.bots.conftest import CHAT, binding, finals, settled

BERLIN = "Europe/Berlin"
#: 2026-12-05 20:00:30 UTC: 21:00:30 in Berlin (winter, UTC+1)
NOW = datetime(2026, 12, 5, 20, 0, 30, tzinfo=UTC).timestamp()


def _utc(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp())  # type: ignore[misc]


@pytest.mark.parametrize(("text", "when"), [
    ("tomorrow 8am standup", When(at=_utc(2026, 12, 6, 7, 0), tz=BERLIN)),
    ("tomorrow at 8:30 pm standup", When(at=_utc(2026, 12, 6, 19, 30), tz=BERLIN)),
    ("today 21:15 standup", When(at=_utc(2026, 12, 5, 20, 15), tz=BERLIN)),
    ("at 22:00 standup", When(at=_utc(2026, 12, 5, 21, 0), tz=BERLIN)),
    # 9:00 has passed in Berlin today: the next 9:00 is tomorrow's
    ("at 9:00 standup", When(at=_utc(2026, 12, 6, 8, 0), tz=BERLIN)),
    ("at 12am standup", When(at=_utc(2026, 12, 5, 23, 0), tz=BERLIN)),
    ("2026-12-24 18:00 standup", When(at=_utc(2026, 12, 24, 17, 0), tz=BERLIN)),
    ("2026-12-24T18:00+00:00 standup", When(at=_utc(2026, 12, 24, 18, 0), tz=BERLIN)),
    ("in 10m standup", When(at=int(NOW) + 600, tz=BERLIN)),
    ("every day 09:00 standup", When(cron="0 9 * * *", tz=BERLIN)),
    ("every weekday 7am standup", When(cron="0 7 * * 1-5", tz=BERLIN)),
    ('cron "0 9 * * 1-5" standup', When(cron="0 9 * * 1-5", tz=BERLIN)),
])
def test_times_are_read_in_the_zone(text: str, when: When) -> None:
    assert parse_when(text, now=NOW, tz=BERLIN) == (when, "standup")


def test_summer_time_and_utc_without_a_zone() -> None:
    summer = datetime(2027, 7, 1, 12, tzinfo=UTC).timestamp()
    assert parse_when("tomorrow 8am x", now=summer, tz=BERLIN)[0].at == _utc(2027, 7, 2, 6, 0)
    # no zone: UTC, as before
    assert parse_when("tomorrow 8am x", now=NOW) == (When(at=_utc(2026, 12, 6, 8, 0)), "x")
    assert parse_when("tomorrow 8am x", now=NOW, tz="UTC")[0] == When(at=_utc(2026, 12, 6, 8))


@pytest.mark.parametrize(("text", "says"), [
    ("at 9 standup", "Say 9:00, 9am or 9pm"),
    ("tomorrow 13pm standup", "is not a time of day"),
    ("today 20:00 standup", r"That time has passed \(times are Europe/Berlin\)"),
])
def test_refusals_name_the_zone_and_what_works(text: str, says: str) -> None:
    with pytest.raises(ReminderError, match=says):
        parse_when(text, now=NOW, tz=BERLIN)


class _Bindings:
    async def lookup(self, platform: str, workspace: str,
                     channel: str) -> BindingSettings | None:
        return BindingSettings(platform="telegram", channel=channel, timezone=BERLIN)


def _event(text: str) -> InboundEvent:
    return InboundEvent(platform="telegram", workspace="123456", channel=str(CHAT),
                        thread_root="7", message_id="9", sender="42", dedupe_key="d", text=text)


async def test_a_cron_reminder_fires_at_local_time_across_daylight_saving(tmp_path: Path) -> None:
    clock = [datetime(2027, 3, 27, 6, 0, tzinfo=UTC).timestamp()]  # 07:00 in Berlin
    fired: list[int] = []

    async def submit(batch: Sequence[tuple[InboundEvent, str]]) -> list[int]:
        fired.extend(int(ev.dedupe_key.rsplit(":", 1)[1]) for ev, _ in batch)
        return [0] * len(batch)

    store = await open_store(f"sqlite:///{tmp_path / 'geode.db'}")
    try:
        book = ThreadReminders(database=store, submit=submit, owner="r1",
                               bindings=_Bindings(), clock=lambda: clock[0])
        answer = await book.remind(_event("/remind every day 09:00 stand up"))
        assert "cron '0 9 * * *' (Europe/Berlin), first at 2027-03-27 09:00 Europe/Berlin" \
            in answer, answer
        scheduler = Scheduler(jobs=JobStore(store=store, threads="telegram:"),
                              run_job=book.fire, owner="r1", clock=lambda: clock[0])

        async def tick_at(*at: int) -> None:
            clock[0] = datetime(*at, tzinfo=UTC).timestamp()  # type: ignore[misc]
            await scheduler.tick()
            await scheduler.wait_runs()

        await tick_at(2027, 3, 27, 7, 59)
        await tick_at(2027, 3, 27, 8, 0)  # winter: 09:00 in Berlin is 08:00 UTC
        # Berlin moves to summer time in the night of the 28th
        await tick_at(2027, 3, 28, 6, 59)
        await tick_at(2027, 3, 28, 7, 0)  # summer: 09:00 in Berlin is 07:00 UTC
        assert fired == [_utc(2027, 3, 27, 8, 0), _utc(2027, 3, 28, 7, 0)]
        (job,) = await JobStore(store=store).list()
        assert job.tz == BERLIN and job.next_run == _utc(2027, 3, 29, 7, 0)
        assert "next 2027-03-29 09:00 Europe/Berlin" in describe(job)
    finally:
        await store.aclose()


async def test_remind_in_a_thread_and_the_lists_show_local_time_with_the_zone(
    make_stack: Any, fake: FakeTelegramServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from geode.cli import cmd_schedule  # noqa: F401 - registers its commands
    from geode.cli.app import app
    from geode.logging import configure_logging

    stack = make_stack(bindings=[binding(timezone=BERLIN)])
    await stack.start()
    fake.user_says(CHAT, "@geode_bot hello", from_user=42)
    await fake.wait_until(lambda: finals(fake, "answer to: hello"), within=10)
    bot = fake.messages_in(CHAT, from_bot=True)[-1].message_id

    async def ask(text: str, expect: str) -> str:
        before = len(fake.sent)
        fake.user_says(CHAT, text, from_user=42, reply_to=bot)

        def got() -> list[str]:
            return [s.plain_text for s in fake.sent[before:] if expect in s.plain_text]

        await fake.wait_until(got, within=10)
        return got()[0]

    set_ = await ask("/remind tomorrow 8am water the plants", "Reminder")
    assert " 08:00 Europe/Berlin" in set_, set_
    listed = await ask("/reminders", "Reminders of this thread")
    assert " 08:00 Europe/Berlin  'water the plants'" in listed, listed
    await settled(stack)
    await stack.stop()
    monkeypatch.setenv("GEODE_HOME", str(stack.home))
    monkeypatch.delenv("GEODE_STORE__URL", raising=False)
    result = await asyncio.to_thread(CliRunner().invoke, app, ["schedule", "list"])
    configure_logging(stream=sys.stderr)  # it configured logging onto the runner's stderr
    assert result.exit_code == 0, (result.output, result.exception)
    assert " 08:00 Europe/Berlin)" in result.output, result.output


def test_a_misspelt_zone_is_a_config_error_with_the_close_match(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    for table in ('[[bindings]]\nplatform = "telegram"\nchannel = "1"\n'
                  'timezone = "Europe/Berln"\n',
                  '[agents.helper]\ntimezone = "Europe/Berln"\n'):
        (home / "config.toml").write_text(table)
        with pytest.raises(ConfigError) as bad:
            load_settings(cwd=tmp_path, env={"GEODE_HOME": str(home)})
        assert "unknown time zone 'Europe/Berln'. Did you mean \"Europe/Berlin\"?" \
            in str(bad.value)


async def test_a_misspelt_zone_exits_2(tmp_path: Path) -> None:
    from tests.cli.test_run_command import _env, geode

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[[bindings]]\nplatform = "telegram"\nchannel = "1"\n'
                                      'timezone = "Mars/Olympus"\n')
    code, _out, err = await geode("schedule", "list", env=_env(home), cwd=tmp_path)
    assert code == 2, err
    assert "unknown time zone 'Mars/Olympus'" in err and "Traceback" not in err
