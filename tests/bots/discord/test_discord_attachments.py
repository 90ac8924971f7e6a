"""Attachments in, on Discord: the layer downloads a message's attachment URLs into the
thread's folder; over the binding's limit refused with a reply and never downloaded."""

from __future__ import annotations

from _discord_stack import (  # noqa: F401  (fixtures)
    dbinding,
    dfake,
    make_dstack,
    shown,
    texts_in,
)

from geode.providers.scripted import ScriptedProvider
from tests.bots._harness import user_messages

LOG = b"worker-3 OOMKilled at 02:14\n"


async def test_a_text_attachment_is_saved_and_given_inline(make_dstack, dfake, home):  # noqa: F811 (fixtures)
    stack = make_dstack(provider=ScriptedProvider(["seen"], repeat_last=True))
    await stack.start()
    att = dfake.add_attachment(LOG, "pods.log", "text/plain; charset=utf-8")
    mid = await dfake.user_says(dfake.channel_id, "why?", mention_bot=True, files=[att])
    await dfake.wait_for(lambda: shown(dfake, "seen"), timeout=10)
    folder = home / "workspaces" / f"discord-{dfake.channel_id}" / "threads" / str(mid)
    [saved] = list(folder.iterdir())
    assert saved.read_bytes() == LOG
    prompt = user_messages(stack.provider.calls[0].messages)[-1]
    assert f"threads/{mid}/{saved.name}" in prompt and "OOMKilled at 02:14" in prompt
    assert dfake.downloads == [f"{att['id']}/pods.log"]


async def test_an_oversized_attachment_is_refused_and_not_downloaded(make_dstack, dfake):  # noqa: F811 (fixtures)
    stack = make_dstack(provider=ScriptedProvider(["ok"], repeat_last=True),
                        bindings=[dbinding(dfake, max_attachment_mb=0.001)])
    await stack.start()
    att = dfake.add_attachment(b"y" * 5000, "dump.bin")
    await dfake.user_says(dfake.channel_id, "look", mention_bot=True, files=[att])
    def replies() -> list[str]:
        return [t for cid in list(dfake.channels) for t in texts_in(dfake, cid)
                if "dump.bin" in t]

    await dfake.wait_for(replies, timeout=10)
    [reply] = replies()
    assert "did not read dump.bin" in reply and "limit" in reply
    assert dfake.downloads == []
