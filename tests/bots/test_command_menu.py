"""The platforms' command menus at connector start: Telegram's ``setMyCommands`` per scope
(private chats, groups), written only when it differs from what the platform holds."""

from __future__ import annotations

from typing import Any

from bots.testing.telegram import FakeTelegramServer
from tests.bots.conftest import binding


async def test_telegram_registers_its_command_menu_once_per_scope(
    make_stack: Any, fake: FakeTelegramServer
) -> None:
    from bots.command_menu import menu

    stack = make_stack(bindings=[binding()])
    await stack.start()
    sets = [c for c in fake.calls if c.method == "setMyCommands"]
    assert sorted(fake._commands_scope(c.params) for c in sets) == [
        "all_group_chats", "all_private_chats"]
    group = [c["command"] for c in fake.my_commands["all_group_chats"]]
    assert {"model", "usage", "status", "stop", "new", "help"} <= set(group)
    assert group == [c.name for c in menu(private=False)]
    assert "start" not in group
    # a restart finds the same menus: it reads them and writes nothing
    await stack.stop()
    await stack.start()
    assert len([c for c in fake.calls if c.method == "setMyCommands"]) == 2
    assert len([c for c in fake.calls if c.method == "getMyCommands"]) == 4
