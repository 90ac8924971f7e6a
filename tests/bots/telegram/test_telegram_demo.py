"""The offline channel demo: the real `geode serve --demo` against the fake Telegram."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from bots.testing.telegram import FakeTelegramServer, TelegramCall
from bots.testing.telegram_demo import CHAT, config_toml, describe


async def test_demo_chats_with_the_real_daemon_and_exits(tmp_path: Path) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "README.md").write_text("# Demo project\n", encoding="utf-8")
    home = tmp_path / "home"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bots.testing.telegram_demo", "--home", str(home),
        "--cwd", str(workspace), "--timeout", "60",
        "What is in this folder?", "+and now?", "/status",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out_b, _ = await asyncio.wait_for(proc.communicate(), 180)
    out = out_b.decode()
    assert proc.returncode == 0, out
    lines = out.splitlines()
    # the three steps of a reply: ack, progress message, the answer edited into it
    assert any(ln.startswith("  [bot reacts 👀 to #1]") for ln in lines), out
    assert "bot: ⏳ Working…" in lines, out
    assert "The README starts with: # Demo project" in out
    # the follow-up continued the thread (same session) and was answered for itself
    assert "You asked: 'You (id 42): and now?'" in out
    assert f"session: telegram:4242:{CHAT}:1" in out
    assert "Traceback" not in out
    # the daemon really ran and stopped cleanly; --home keeps its files
    assert (home / "serve.log").exists()
    assert (home / "geode.db").exists()


async def test_demo_config_binds_the_chat_to_the_fake() -> None:
    async with FakeTelegramServer(token="4242:X") as fake:
        text = config_toml(fake)
    assert f'base_url = "{fake.base_url}"' in text
    assert f'channel = "{CHAT}"' in text
    assert "health_port = 0" in text


def test_describe_shows_what_a_user_would_see() -> None:
    def call(method: str, status: int = 200, **params: object) -> TelegramCall:
        return TelegramCall(method=method, params=dict(params), status=status)

    assert describe(call("sendMessage", text="<b>hi</b> &amp; bye",
                         parse_mode="HTML")) == "bot: hi & bye"
    assert describe(call("editMessageText", message_id=7, text="done")) == "bot (edits #7): done"
    assert describe(call("setMessageReaction", message_id=3,
                         reaction=[{"type": "emoji", "emoji": "👀"}])) == (
        "  [bot reacts 👀 to #3]")
    assert describe(call("sendMessage", 429)) == "  [sendMessage answered 429]"
    assert describe(call("getUpdates")) is None


def test_the_demo_model_answers_the_latest_prompt_from_this_turns_results() -> None:
    from geode.demo import _answer
    from geode.messages import Message, ToolResultBlock
    from geode.providers.base import ModelRequest

    def results(*texts: str) -> Message:
        return Message(role="user", content=[ToolResultBlock.text(f"t{i}", t)
                                             for i, t in enumerate(texts)])

    history = (
        Message.user("first question"), results("old.txt"), results("# Old readme"),
        Message.assistant("first answer"),
        Message.user("second question"), results("a.py\nb.py\nREADME.md"),
        results("# New readme"),
    )
    text = _answer(ModelRequest(model="scripted", system="", messages=history))
    assert "You asked: 'second question'" in text
    assert "(3 entries): a.py, b.py, README.md" in text
    assert "The README starts with: # New readme" in text
