"""``parse_when``: every form of WHEN (UTC), and the refusals that say what works."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bots.reminders import ReminderError, When, parse_when

NOW = datetime(2026, 12, 5, 20, 0, 30, tzinfo=UTC).timestamp()


def _at(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp())  # type: ignore[misc]


@pytest.mark.parametrize(("text", "when", "what"), [
    ("in 30s ping", When(at=int(NOW) + 30), "ping"),
    ("in 10m check the deploy", When(at=int(NOW) + 600), "check the deploy"),
    ("in 2 hours stretch", When(at=int(NOW) + 7200), "stretch"),
    ("in 1d renew it", When(at=int(NOW) + 86400), "renew it"),
    ("tomorrow 09:00 standup", When(at=_at(2026, 12, 6, 9, 0)), "standup"),
    ("today 21:15 call", When(at=_at(2026, 12, 5, 21, 15)), "call"),
    ("2026-12-24T18:00 presents", When(at=_at(2026, 12, 24, 18, 0)), "presents"),
    ("2026-12-24 18:00 presents", When(at=_at(2026, 12, 24, 18, 0)), "presents"),
    ("2026-12-24T18:00+01:00 presents", When(at=_at(2026, 12, 24, 17, 0)), "presents"),
    ("every day 09:00 notes", When(cron="0 9 * * *"), "notes"),
    ("every weekday 8:30 queue", When(cron="30 8 * * 1-5"), "queue"),
    ('cron "0 9 * * 1" weekly', When(cron="0 9 * * 1"), "weekly"),
    ("cron 0 9 * * 1-5 daily", When(cron="0 9 * * 1-5"), "daily"),
])
def test_the_forms(text: str, when: When, what: str) -> None:
    assert parse_when(text, now=NOW) == (when, what)


@pytest.mark.parametrize(("text", "says"), [
    ("whenever do it", "I do not understand when"),
    ("in 5 fortnights do it", "Unknown unit"),
    ('cron "* * * * *" spam', "more often than every 5 minutes"),
    ('cron "0,2 9 * * *" twice', "more often than every 5 minutes"),
    ('cron "* * * * * */10" secs', "five fields"),
    ("in 1h /new", "not a command"),
    ("2026-12-01T09:00 late", "That time has passed"),
    ("in 400d far", "more than a year ahead"),
    ("tomorrow 24:00 no", "is not a time of day"),
    ("in 10m", "What should I do then?"),
])
def test_the_refusals(text: str, says: str) -> None:
    with pytest.raises(ReminderError, match=says):
        parse_when(text, now=NOW)
