"""``geode serve --demo``: the chat-ops service offline, in a browser.

On a configuration with no chat channel and no binding (a fresh or throwaway home), the demo
adds the web chat (``[channels.webchat]``), one binding on it (channel ``demo``, its one
user ``webchat:demo`` allowed and the approver of ``write_file``, working in the folder
``geode serve`` was started in, like ``geode run --demo``) and the console on
``127.0.0.1`` (port 8788 in a throwaway home, or any free one when that is taken or the
home was given). Nothing is written to the
configuration. Once the daemon is up, :func:`prepare`'s ``announce`` prints the web chat's
address and a one-time sign-in link for ``webchat:demo``.

A configuration that already has channels or bindings is served as it is (the scripted
model only), as ``--demo`` always did.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from geode.settings import BindingSettings

if TYPE_CHECKING:
    from geode.settings import Settings

__all__ = ["DEMO_CHANNEL", "DEMO_USER", "prepare"]

#: the demo binding's channel and its one user (signed in as ``webchat:demo``)
DEMO_CHANNEL = "demo"
DEMO_USER = "demo"
#: the console's usual port; any free one when another process has it
_PORT = 8788

Announce = Callable[[Any], Awaitable[list[str]]]


def _listen(*, throwaway: bool) -> str:
    # the usual port for a person's first run (a throwaway home); a home someone set (a
    # test, a second demo) takes any free port, so two demos never race for one
    if not throwaway:
        return "127.0.0.1:0"
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", _PORT))
        except OSError:
            return "127.0.0.1:0"
    return f"127.0.0.1:{_PORT}"


def prepare(settings: Settings, *, workspace: Path,
            throwaway: bool = False) -> tuple[Settings, Announce | None]:
    """The demo's configuration (unchanged when it serves channels or bindings already),
    and what to print once the daemon is up. ``throwaway``: the home is ``--demo``'s own."""
    if settings.channels or settings.bindings:
        return settings, None
    binding = BindingSettings(platform="webchat", channel=DEMO_CHANNEL,
                              allow_users=[DEMO_USER], approve=["write_file"],
                              approvers=[DEMO_USER], workspace=str(workspace))
    console = settings.console
    if not console.enabled:
        console = console.model_copy(update={"enabled": True,
                                             "listen": _listen(throwaway=throwaway)})
    demo = settings.model_copy(update={"channels": {"webchat": {}}, "bindings": [binding],
                                       "console": console})
    return demo, _announce(demo)


def _announce(settings: Settings) -> Announce:
    async def announce(daemon: Any) -> list[str]:
        from bots.console import Console, Identity, issue_link

        console = next((c for c in daemon.connectors if isinstance(c, Console)), None)
        store = daemon.database
        if console is None or store is None or not console.ready:
            return ["  web chat  NOT READY: the console did not start (see the log above)"]
        link = await issue_link(store, settings, Identity("webchat", DEMO_USER), via="cli",
                                base=console.url)
        return [
            f"  web chat  {console.url}/chat  (the scripted demo model; channel "
            f"{DEMO_CHANNEL!r}, workspace {settings.bindings[0].workspace})",
            f"  sign in   {link}",
            "            (once, within 10 minutes; then open the web chat. Ctrl-C stops.)",
        ]

    return announce
