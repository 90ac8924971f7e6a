"""Issue #30 on Slack, files in and out: ``url_private`` naming a host that is not Slack's
gets no download and never the bot token (finding 10); ``send_file`` of a hard link to
GEODE's ``.env`` uploads nothing (finding 7)."""

from __future__ import annotations

import os

from slack_helpers import ALICE, CH, bot_messages, make, mention, slack_binding

from geode.providers.scripted import ScriptedProvider
from tests.bots._files import sending
from tests.bots.conftest import user_messages
from tests.security._evil import evil_server

SECRET = "sk-ant-api03-PLANTEDsecret0123456789abcdefXYZ"


def _said(fake, needle: str) -> list[str]:
    return [m["text"] for m in bot_messages(fake, CH) if needle in m["text"]]


async def test_url_private_on_another_host_gets_no_token(stacks, home, fake):
    async with evil_server() as evil:
        stack = make(stacks, home, fake, provider=ScriptedProvider(["ok"], repeat_last=True))
        await stack.start()
        f = fake.add_file(b"a,b\n", "sales.csv", "text/csv")
        info = fake._files[f["id"]][0]
        info["url_private"] = evil.url + "/metrics"
        info["url_private_download"] = evil.url + "/metrics?download=1"
        await fake.user_posts(CH, mention("total?"), user=ALICE,
                              extra={"files": [f], "subtype": "file_share"})
        await fake.wait_until(lambda: _said(fake, "sales.csv"), within=10)
        assert evil.hits == []  # neither the request nor the token reached it
        prompt = user_messages(stack.provider.calls[0].messages)[-1]
        assert "sales.csv not read" in prompt and "geode_turns_total" not in prompt
        assert not list((home / "workspaces").rglob("*sales.csv*"))


async def test_send_file_of_a_hard_link_to_geode_env_uploads_nothing(stacks, home, fake):
    work = home / "workspaces" / f"slack-{CH}"
    work.mkdir(parents=True)
    (home / ".env").write_text(f"SLACK_BOT_TOKEN={SECRET}\n")
    os.link(home / ".env", work / "x")
    stack = make(stacks, home, fake, provider=ScriptedProvider([sending("x")], repeat_last=True),
                 bindings=[slack_binding(tools=["send_file"])])
    await stack.start()
    await fake.user_posts(CH, mention("send x"), user=ALICE)
    await fake.wait_until(lambda: _said(fake, "result:"), within=10)
    assert fake.uploads == []
    assert not any(SECRET in m["text"] for m in bot_messages(fake, CH))
    [answer] = _said(fake, "result:")
    assert "GEODE's own files" in answer, answer
