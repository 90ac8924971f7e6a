"""A fourth platform is one folder plus one registration line (issue #32).

``bots/testing/echo/`` is a whole platform (an in-process chat, its options and spec, its
connector on the shared base). It is registered here the way an outside package is: a
distribution on ``sys.path`` whose ``entry_points.txt`` has the one line
``echo = bots.testing.echo.options:SPEC`` in the ``geode.platforms`` group. It is not in
GEODE's own pyproject.toml: a platform for tests must not show in a user's platform lists,
doctor or redaction. From there everything ``geode serve`` does with a platform (settings,
start checks, connector builder, the shared layer's durable inbound and outbox, redaction)
takes it up with no other edit anywhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from _harness import echo

from bots import build_connectors
from bots.platforms import channel_options, missing_tokens, platform_spec
from bots.testing.echo import EchoChat
from bots.testing.echo.options import SPEC
from geode.daemon import Daemon
from geode.errors import ConfigError
from geode.platforms import platform_names, reset_platforms
from geode.providers.scripted import ScriptedProvider
from geode.secret_redaction import redact_text
from geode.settings import load_settings
from geode.tools.names import known_tool_names

TOKEN = "echo-tok-0123456789abcdef"


def _install(root: Path) -> None:
    """A distribution "geode-echo-chat" that registers the platform, as pip would leave it."""
    info = root / "geode_echo_chat-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: geode-echo-chat\n"
                                   "Version: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[geode.platforms]\necho = bots.testing.echo.options:SPEC\n")


@pytest.fixture
def echo_platform(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    _install(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    reset_platforms()
    yield
    monkeypatch.undo()
    reset_platforms()


def test_an_installed_distribution_registers_a_platform(echo_platform: None) -> None:
    assert "echo" in platform_names()
    assert {"telegram", "slack", "discord"} <= set(platform_names())
    assert platform_spec("echo") is SPEC
    # its options are checked like any platform's, unknown keys with the close match
    assert channel_options("echo", {"chat": "c"}).chat == "c"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"unknown key 'chta'\. Did you mean chat"):
        channel_options("echo", {"chta": "c"})
    # its secrets: missing said in the operator's words; its token's shape masked anywhere
    options = channel_options("echo", {"chat": "nowhere"})
    _, secrets = load_settings(env={"GEODE_HOME": "/nonexistent-home"})
    assert missing_tokens("echo", options, secrets) == [
        "[channels.echo] is configured but $ECHO_CHAT_TOKEN is not set: put the echo bot's "
        "token (echo-tok-…) in the environment or $GEODE_HOME/.env.",
        "[channels.echo] chat 'nowhere' is not open"]  # its spec's own doctor check
    assert redact_text(f"the token is {TOKEN}!") == "the token is [REDACTED]!"
    assert "send_file" in known_tool_names()


def test_without_the_distribution_there_is_no_such_platform(tmp_path: Path) -> None:
    reset_platforms()
    assert "echo" not in platform_names()
    assert redact_text(f"the token is {TOKEN}!") == f"the token is {TOKEN}!"
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[channels.echo]\nchat = "x"\n')
    with pytest.raises(ConfigError, match=r"\[channels.echo\]: unknown platform 'echo'"):
        load_settings(env={"GEODE_HOME": str(home)})


async def test_a_message_in_the_scripted_reply_out(echo_platform: None, tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings, secrets = load_settings(
        env={"GEODE_HOME": str(home), "ECHO_CHAT_TOKEN": TOKEN}, health_port=0,
        store={"url": f"sqlite:///{home / 'geode.db'}"},
        lanes={"global_cap": 8, "channel_cap": 8},
        channels={"echo": {"chat": "room", "pump_interval_s": 0.2, "lease_ttl_s": 3.0,
                           "progress_edit_interval_s": 0.0, "stream": False,
                           "progress_after_ms": 0}},
        bindings=[{"platform": "echo", "channel": "C1", "allow_users": ["ann"]}],
    )
    provider = ScriptedProvider([echo], repeat_last=True)
    daemon = Daemon(settings=settings, secrets=secrets, provider_factory=lambda: provider,
                    workspace=home / "ws", drain_timeout_s=0.5)
    async with EchoChat(name="room", token=TOKEN) as chat:
        # what `geode serve` does: every enabled [channels.*] built by its platform's spec
        (connector,) = build_connectors(daemon, settings, secrets)
        assert connector.platform == "echo"
        daemon.add_connector(connector)
        await daemon.start()
        try:
            asked = chat.post("C1", "ann", "@echo_bot what is two and two?")
            async with asyncio.timeout(30):
                while not any(m.text.startswith("answer to:")
                              for m in chat.bot_messages("C1")):
                    await asyncio.sleep(0.05)
            (reply,) = [m for m in chat.bot_messages("C1") if m.text.startswith("answer to:")]
            assert reply.text == "answer to: @echo_bot what is two and two?"
            assert reply.thread_root == asked.id
            assert len(provider.calls) == 1
            # recorded like the others: the event durably, the reply in the outbox
            layer = connector.layer
            assert layer is not None
            async with asyncio.timeout(10):
                while (await layer.inbound.unfinished("echo", "room")
                       or await layer.outbox.open_rows("echo", "room")):
                    await asyncio.sleep(0.02)
            assert await layer.inbound.known_keys([f"C1:{asked.id}"]) == {f"C1:{asked.id}"}
            event = await layer.inbound.get(1)
            assert event is not None and event.status == "done"
            row = await layer.outbox.for_event(1)
            assert row is not None and row.session_key == f"echo:room:C1:{asked.id}"
            assert row.status == "sent" and reply.id in row.message_ids
        finally:
            await daemon.shutdown()
