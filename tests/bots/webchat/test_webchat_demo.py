"""What ``geode serve --demo`` adds to a configuration (``bots.webchat.demo.prepare``)."""

from __future__ import annotations

from pathlib import Path

from bots.webchat.demo import prepare
from geode.settings import BindingSettings, ConsoleSettings, Settings


def test_a_bare_configuration_gets_the_web_chat_a_demo_binding_and_the_console(
        tmp_path: Path) -> None:
    settings, announce = prepare(Settings(home=tmp_path), workspace=tmp_path / "project")
    assert announce is not None
    assert settings.channels == {"webchat": {}}
    [b] = settings.bindings
    assert (b.platform, b.channel, b.allow_users, b.approvers) == (
        "webchat", "demo", ["demo"], ["demo"])
    assert b.workspace == str(tmp_path / "project")
    # a home someone gave (a test, a second demo) never races for the usual port
    assert settings.console.enabled and settings.console.listen == "127.0.0.1:0"


def test_a_configuration_with_channels_or_bindings_is_served_as_it_is(tmp_path: Path) -> None:
    for given in (Settings(home=tmp_path, channels={"telegram": {}}),
                  Settings(home=tmp_path, bindings=[
                      BindingSettings(platform="telegram", channel="-1001")])):
        settings, announce = prepare(given, workspace=tmp_path)
        assert settings is given and announce is None


def test_a_console_already_enabled_keeps_its_address(tmp_path: Path) -> None:
    given = Settings(home=tmp_path, console=ConsoleSettings(enabled=True,
                                                             listen="127.0.0.1:9999"))
    settings, _ = prepare(given, workspace=tmp_path, throwaway=True)
    assert settings.console.listen == "127.0.0.1:9999"
