"""Issue #30 on Discord, files in and out: an attachment URL that is not Discord's CDN (here
an address standing for GEODE's own ``/metrics``) is not fetched (finding 10); ``send_file``
of a hard link to GEODE's ``.env`` uploads nothing (finding 7)."""

from __future__ import annotations

import os

from _discord_stack import (  # noqa: F401  (fixtures)
    dbinding,
    dfake,
    make_dstack,
    texts_in,
)

from geode.providers.scripted import ScriptedProvider
from tests.bots._files import sending
from tests.bots._harness import user_messages
from tests.security._evil import evil_server

SECRET = "sk-ant-api03-PLANTEDsecret0123456789abcdefXYZ"


def _said(fake, needle: str) -> list[str]:
    return [t for cid in list(fake.channels) for t in texts_in(fake, cid) if needle in t]


async def test_an_attachment_url_off_the_cdn_is_not_fetched(make_dstack, dfake, home):  # noqa: F811 (fixtures)
    async with evil_server() as evil:
        stack = make_dstack(provider=ScriptedProvider(["ok"], repeat_last=True))
        await stack.start()
        att = dfake.add_attachment(b"x", "m.txt", "text/plain")
        att["url"] = att["proxy_url"] = evil.url + "/metrics"
        await dfake.user_says(dfake.channel_id, "read", mention_bot=True, files=[att])
        await dfake.wait_for(lambda: _said(dfake, "m.txt"), timeout=10)
        assert evil.hits == []
        prompt = user_messages(stack.provider.calls[0].messages)[-1]
        assert "m.txt not read" in prompt and "geode_turns_total" not in prompt
        assert not list((home / "workspaces").rglob("*m.txt*"))


async def test_send_file_of_a_hard_link_to_geode_env_uploads_nothing(make_dstack, dfake, home):  # noqa: F811 (fixtures)
    work = home / "workspaces" / f"discord-{dfake.channel_id}"
    work.mkdir(parents=True)
    (home / ".env").write_text(f"DISCORD_BOT_TOKEN={SECRET}\n")
    os.link(home / ".env", work / "x")
    stack = make_dstack(provider=ScriptedProvider([sending("x")], repeat_last=True),
                        bindings=[dbinding(dfake, tools=["send_file"])])
    await stack.start()
    await dfake.user_says(dfake.channel_id, "send x", mention_bot=True)
    await dfake.wait_for(lambda: _said(dfake, "result:"), timeout=10)
    assert not any(SECRET in t for t in _said(dfake, ""))
    [answer] = _said(dfake, "result:")
    assert "GEODE's own files" in answer, answer
    assert not dfake.uploads
