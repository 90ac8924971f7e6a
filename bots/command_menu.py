"""The thread commands as the platforms' command menus show them (Telegram's
``setMyCommands``, Discord's application commands, the Slack manifest's ``/geode``).

Built from :data:`bots.commands.COMMANDS`: a command without a line here is left out of the
menus (it still works when typed). ``/start`` is Telegram's own greeting, never listed.
"""

from __future__ import annotations

from dataclasses import dataclass

from bots.commands import COMMANDS

__all__ = ["MenuCommand", "menu"]


@dataclass(frozen=True, kw_only=True)
class MenuCommand:
    """One command of a menu: its name, a description (at most 100 characters, Discord's
    limit) and its arguments (name, description, required) for the platforms that ask."""

    name: str
    description: str
    options: tuple[tuple[str, str, bool], ...] = ()
    #: offered only in direct messages (a sign-in link must not be asked for in a group)
    private_only: bool = False


_MENU: dict[str, MenuCommand] = {m.name: m for m in (
    MenuCommand(name="new", description="Start a new session in this thread"),
    MenuCommand(name="reset", description="Same as /new"),
    MenuCommand(name="status", description="Session, model and running turn of this thread"),
    MenuCommand(name="stop", description="Stop the running turn of this thread"),
    MenuCommand(name="help", description="What GEODE does here"),
    MenuCommand(name="approve", description="Approve a pending request (reply to it, or its id)",
                options=(("id", "The request's id", False),)),
    MenuCommand(name="deny", description="Deny a pending request (reply to it, or its id)",
                options=(("id", "The request's id", False),)),
    MenuCommand(name="model", description="Show or pick this thread's model",
                options=(("id", "A model id this channel may use", False),)),
    MenuCommand(name="usage", description="Tokens of this thread and yours, against the caps"),
    MenuCommand(name="remind", description="Have GEODE do something here later: WHEN WHAT",
                options=(("when", "in 10m, tomorrow 09:00, every day 09:00, cron \"0 9 * * 1\"",
                          True),
                         ("what", "What to do then", True))),
    MenuCommand(name="reminders", description="This thread's reminders (cancel ID cancels one)",
                options=(("cancel", "The id of the reminder to cancel", False),)),
    MenuCommand(name="memory", description="What GEODE remembers here"),
    MenuCommand(name="forget", description="Forget a memory entry (ID, or all)",
                options=(("id", "An entry's id, or all", False),)),
    MenuCommand(name="rewind", description="Take this thread back by N turns",
                options=(("turns", "How many turns (default 1)", False),)),
    MenuCommand(name="console", description="A sign-in link for the web console",
                private_only=True),
)}


def menu(*, private: bool = True) -> list[MenuCommand]:
    """The commands a menu lists, in :data:`COMMANDS` order (``private``: for direct
    messages, where the private-only ones are offered too)."""
    return [_MENU[name] for name in COMMANDS
            if name in _MENU and (private or not _MENU[name].private_only)]
