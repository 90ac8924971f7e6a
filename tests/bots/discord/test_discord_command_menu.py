"""Discord: the thread commands are registered as guild slash commands at connector start,
written only when the guild's differ (a restart writes nothing), and a slash command's
options reach the command as its text (``/model`` with its ``id``)."""

from __future__ import annotations

from _discord_stack import (  # noqa: F401  (fixtures)
    dfake,
    make_dstack,
    texts_in,
)

from bots.discord import SLASH_COMMANDS


async def test_commands_are_registered_at_start_once(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack = make_dstack()
    await stack.start()
    await dfake.wait_for(lambda: dfake.command_syncs, timeout=10)
    names = [c["name"] for c in SLASH_COMMANDS]
    assert dfake.command_syncs == [(dfake.guild_id, names)]
    assert {"model", "usage", "status", "stop", "new", "help"} <= set(names)
    model = next(c for c in SLASH_COMMANDS if c["name"] == "model")
    assert [(o["name"], o["type"], o["required"]) for o in model["options"]] == [
        ("id", 3, False)]
    def reads() -> int:
        return len([r for r in dfake.requests if r[0] == "GET" and r[1].endswith("/commands")])

    assert reads() == 1
    await stack.stop()
    await stack.start()  # the guild holds them already: read, nothing written
    await dfake.wait_for(lambda: reads() == 2, timeout=10)
    await stack.stop()
    assert len(dfake.command_syncs) == 1


def test_a_slash_commands_options_are_its_text() -> None:
    from bots.discord.inbound import _command_text

    assert _command_text("model", {"options": [{"name": "id", "type": 3,
                                                "value": "openai:beta-2"}]}) == (
        "/model openai:beta-2")
    assert _command_text("reminders", {"options": [{"name": "cancel", "type": 3,
                                                    "value": "rem-1a2b"}]}) == (
        "/reminders cancel rem-1a2b")
    assert _command_text("remind", {"options": [
        {"name": "when", "type": 3, "value": "in  10m"},
        {"name": "what", "type": 3, "value": "check\nthe deploy"}]}) == (
        "/remind in 10m check the deploy")
    assert _command_text("status", {}) == "/status"
