"""Attachments in, on Slack: the layer reads ``files.info`` and downloads ``url_private`` with
the bot token into the thread's folder; over the binding's limit refused with a reply and
never downloaded."""

from __future__ import annotations

from slack_helpers import ALICE, CH, bot_messages, make, mention, slack_binding, visible

from geode.providers.scripted import ScriptedProvider
from tests.bots.conftest import user_messages

CSV = b"region,revenue\nnorth,42\nsouth,17\n"


async def test_a_csv_is_downloaded_with_the_bot_token_and_given_inline(stacks, home, fake):
    stack = make(stacks, home, fake, provider=ScriptedProvider(["summed"], repeat_last=True))
    await stack.start()
    f = fake.add_file(CSV, "sales.csv", "text/csv")
    ts = await fake.user_posts(CH, mention("total?"), user=ALICE,
                               extra={"files": [f], "subtype": "file_share"})
    await fake.wait_until(lambda: visible(fake, "summed"), within=10)
    folder = home / "workspaces" / f"slack-{CH}" / "threads" / ts
    [saved] = list(folder.iterdir())
    assert saved.read_bytes() == CSV
    prompt = user_messages(stack.provider.calls[0].messages)[-1]
    assert saved.name in prompt and "north,42" in prompt
    assert fake.downloads == [f["id"]]  # the private URL answered: the token was sent


async def test_an_oversized_file_is_refused_and_not_downloaded(stacks, home, fake):
    stack = make(stacks, home, fake, provider=ScriptedProvider(["ok"], repeat_last=True),
                 bindings=[slack_binding(max_attachment_mb=0.001)])
    await stack.start()
    f = fake.add_file(b"z" * 5000, "huge.txt")
    await fake.user_posts(CH, mention("read"), user=ALICE,
                          extra={"files": [f], "subtype": "file_share"})

    def replies() -> list[str]:
        return [m["text"] for m in bot_messages(fake, CH) if "huge.txt" in m["text"]]

    await fake.wait_until(replies, within=10)
    assert "did not read huge.txt" in replies()[0]
    assert fake.downloads == []
