"""The bot's own messages come back on the gateway (the progress message in the thread):
they cost no write (no record, no cursor advance), and a follow-up in that thread, even one
posted while the bot was down, is still recorded and answered."""

from __future__ import annotations

from typing import Any

from _discord_stack import (  # noqa: F401  (fixtures)
    dfake,
    make_dstack,
    said,
    sid,
    visible_everywhere,
    wait_shown,
)


async def test_own_messages_on_the_gateway_write_nothing(make_dstack: Any, dfake: Any,  # noqa: F811
                                                         ) -> None:
    stack = make_dstack()
    await stack.start()
    connector = stack.connector
    submits: list[tuple[int, Any]] = []
    real = connector.submit

    async def counted(events: Any, **kw: Any) -> Any:
        submits.append((len(events), kw.get("cursor")))
        return await real(events, **kw)

    connector.submit = counted
    root = await dfake.user_says(dfake.channel_id, "first", mention_bot=True)
    await wait_shown(dfake, "answer to: first")
    await dfake.user_says(dfake.channel_id, "second", thread_id=root)
    await wait_shown(dfake, "answer to: second")
    assert [n for n, _cursor in submits] == [1, 1]  # the two user messages, nothing else
    await stack.stop()
    await dfake.user_says(dfake.channel_id, "third, while down", thread_id=root)
    await stack.start()
    await wait_shown(dfake, "answer to: third, while down")
    assert visible_everywhere(dfake, "answer to: second") == 1
    restored = await stack.store.checkpointer(sid(dfake, root)).load()
    assert said(restored.messages) == ["first", "second", "third, while down"]
