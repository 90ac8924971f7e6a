"""Issue #30 on Telegram, files in and out: a ``getFile`` ``file_path`` climbing out of
``/file/bot<token>/`` is not fetched (finding 10), and ``send_file`` of a hard link to
GEODE's ``.env`` uploads nothing (finding 7)."""

from __future__ import annotations

import os

from geode.providers.scripted import ScriptedProvider
from tests.bots._files import sending
from tests.bots.conftest import CHAT, binding, last_user_text

SECRET = "sk-ant-api03-PLANTEDsecret0123456789abcdefXYZ"


async def test_a_file_path_outside_the_bot_file_folder_is_not_fetched(make_stack, fake, home):
    """``../../bot<token>/getMe`` would be the Bot API's own JSON (any other path of the
    server: ``../../_ctl/calls`` on a proxy); it is refused before any request."""
    provider = ScriptedProvider(["ok"], repeat_last=True)
    await make_stack(provider=provider, bindings=[binding()]).start()
    fid = fake.add_file(b"not reached", file_path=f"../../bot{fake.token}/getMe")
    upd = fake.user_says(CHAT, "", from_user=42, extra={
        "document": {"file_id": fid, "file_unique_id": "u1", "file_name": "x.json",
                     "mime_type": "application/json", "file_size": 11},
        "caption": "@geode_bot read", "caption_entities": [
            {"type": "mention", "offset": 0, "length": 10}]})
    mid = fake.message_id_for(upd)
    await fake.wait_until(lambda: [s for s in fake.sent if s.plain_text.endswith("ok")],
                          within=10)
    prompt = last_user_text(provider.calls[0])
    assert "x.json not read" in prompt and "is_bot" not in prompt
    assert fake.downloads == []  # nothing reached the file endpoint, nor anything else
    folder = home / "workspaces" / f"telegram-{CHAT}" / "threads" / str(mid)
    assert not folder.exists() or list(folder.iterdir()) == []


async def test_send_file_of_a_hard_link_to_geode_env_uploads_nothing(make_stack, fake, home):
    work = home / "workspaces" / f"telegram-{CHAT}"
    work.mkdir(parents=True)
    (home / ".env").write_text(f"ANTHROPIC_API_KEY={SECRET}\n")
    os.link(home / ".env", work / "x")
    provider = ScriptedProvider([sending("x")], repeat_last=True)
    await make_stack(provider=provider, bindings=[binding(tools=["send_file"])]).start()
    fake.user_says(CHAT, "@geode_bot send x", from_user=42)
    await fake.wait_until(lambda: [s for s in fake.sent if s.plain_text.startswith("result:")],
                          within=10)
    assert fake.uploads == []
    assert not any(SECRET in s.plain_text for s in fake.sent)
    [answer] = [s.plain_text for s in fake.sent if s.plain_text.startswith("result:")]
    assert "GEODE's own files" in answer, answer
