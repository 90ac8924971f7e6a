"""The gateway's message events reach the intake as raw dicts only: discord.py does not also
build a Message (and Member) for each, the bot's own progress messages and edits included,
to dispatch events nothing listens to."""

from __future__ import annotations

from typing import Any

from _discord_stack import dfake, make_dstack, wait_shown  # noqa: F401  (fixtures)


async def test_message_events_are_not_parsed_into_discord_objects(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack = make_dstack()
    connector = await stack.start()
    assert connector.client is not None
    state = connector.client._connection  # discord.py's parsers dispatch through it
    dispatched: list[str] = []
    dispatch = state.dispatch

    def counting(event: str, /, *args: Any, **kwargs: Any) -> None:
        dispatched.append(event)
        dispatch(event, *args, **kwargs)

    state.dispatch = counting
    await dfake.user_says(dfake.channel_id, "hello", mention_bot=True)
    await wait_shown(dfake, "answer to: hello")
    assert dispatched  # the gateway's other events still go through discord.py
    assert not {"message", "message_edit", "raw_message_edit"} & set(dispatched), dispatched
