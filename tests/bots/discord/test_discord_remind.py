"""Discord: ``/remind`` as a slash command, its ``when`` and ``what`` options the command's
text, sets a reminder that fires in the thread."""

from __future__ import annotations

from _discord_stack import (  # noqa: F401  (fixtures)
    dfake,
    make_dstack,
    texts_in,
)

from bots.discord import SLASH_COMMANDS


def test_remind_and_reminders_are_slash_commands() -> None:
    remind = next(c for c in SLASH_COMMANDS if c["name"] == "remind")
    assert [(o["name"], o["required"]) for o in remind["options"]] == [
        ("when", True), ("what", True)]
    assert "reminders" in [c["name"] for c in SLASH_COMMANDS]


async def test_slash_remind_with_its_options_sets_a_reminder(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack = make_dstack()
    await stack.start()
    root = await dfake.user_says(dfake.channel_id, "hello", mention_bot=True)
    await dfake.wait_for(lambda: root in dfake.channels, timeout=10)
    await dfake.wait_for(lambda: dfake.command_syncs, timeout=10)
    await dfake.slash_command(dfake.guild_id, root, "remind", options=[
        {"name": "when", "type": 3, "value": "in 1s"},
        {"name": "what", "type": 3, "value": "check the deploy"}])
    await dfake.wait_for(lambda: any("answer to: check the deploy" in t
                                     for t in texts_in(dfake, root)), timeout=15)
    assert any(t.startswith("⏰ Reminder rem-") for t in texts_in(dfake, root))
