"""``/console`` in a chat: a one-time console sign-in link, sent in a direct message only.

Sent to the bot in a direct message (a Telegram private chat, a Slack DM, a Discord DM),
``/console`` answers with a sign-in link for the sender's own chat identity
(``PLATFORM:USER_ID``), as ``geode console link --as`` prints one on the host: the same
rights check (``[console] operators`` or an approver of some binding), the same limit of
links per identity. In a group or a thread it answers that the link comes in a direct
message, and never posts one.

A direct message is usually not a bound channel, so the ordinary command path (which runs
behind the binding check) never sees it: the router's direct-message gate, placed before
the binding check, hands ``/console`` in a direct message (and nothing else) to
:func:`console_dm`. Its answer is sent straight to the platform, not through the outbox: the
store keeps only the SHA-256 of a link, and an outbox row would keep the link itself. A lost
answer is asked for again (each link is single-use, good for 10 minutes, and rate-limited per
identity).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import structlog

if TYPE_CHECKING:
    from bots.events import InboundEvent
    from bots.port import PlatformClient, TurnHost
    from geode.settings import Settings
    from geode.store.database import Database

__all__ = ["IN_A_GROUP", "asks_for_link", "console_answer", "console_command", "console_dm",
           "in_thread", "is_console"]

log = structlog.get_logger(__name__)

COMMAND = "console"
IN_A_GROUP = ("Send /console to me in a direct message: a console sign-in link is never "
              "posted in a shared chat.")
NOT_ENABLED = "The web console is not enabled on this service."
#: what the link is for (``console_links.via``: at most 16 characters)
VIA = "dm"


#: ``/console`` or ``/console@thisbot`` (``bots.commands.parse_command``'s form; matched
#: here so that the router's chain and the commands, which import this module, are not
#: imported by it)
_COMMAND = re.compile(r"^/console(?:@([A-Za-z0-9_]+))?(?:\s|$)", re.IGNORECASE)



def _is_console(text: str, bot_username: str | None) -> bool:
    m = _COMMAND.match(text.strip())
    if m is None:
        return False
    target = m.group(1)
    return target is None or (bot_username is not None
                              and target.lower() == bot_username.lower())


@runtime_checkable
class HasSettings(Protocol):
    """A host that knows its configuration (``geode serve``'s daemon); checked per use."""

    @property
    def settings(self) -> Settings: ...


def asks_for_link(text: object) -> bool:
    """Whether a message's text is ``/console`` (a connector that records only its bound
    channels records such a direct message too: Discord)."""
    return isinstance(text, str) and _is_console(text, None)


def in_thread(event: InboundEvent) -> str:
    """The answer of ``/console`` that reached a bound thread's command path: a group or a
    thread gets the pointer to a direct message; a direct message only gets here when the
    host cannot make links (no console)."""
    return NOT_ENABLED if event.is_dm else IN_A_GROUP


async def console_answer(store: Database, settings: Settings, platform: str,
                         user_id: str) -> str:
    """The direct-message answer to ``/console`` from ``platform:user_id``: a sign-in link,
    or why there is none."""
    from bots.console.access import Identity
    from bots.console.links import issue_link
    from bots.store.console import ConsoleLinkLimitError
    from geode.errors import ConfigError

    if not settings.console.enabled:
        return NOT_ENABLED
    who = Identity(platform=platform, user_id=user_id)
    try:
        url = await issue_link(store, settings, who, via=VIA)
    except ConfigError:
        log.info("console.link_refused", by=str(who), via=VIA)
        return (f"{who} may not sign in to the console: only its operators and the "
                "approvers of a channel may.")
    except ConsoleLinkLimitError:
        log.info("console.link_limited", by=str(who), via=VIA)
        return ("You were sent several sign-in links in the last 10 minutes: use one of "
                "them, or wait a few minutes.")
    log.info("console.link_issued", by=str(who), via=VIA)
    return (f"Your console sign-in link, good once within 10 minutes (it signs in as {who}):\n"
            f"{url}")


async def console_command(host: TurnHost, platform: str, user_id: str, *, dm: bool) -> str:
    """The answer to a platform's own console command (Slack's ``/geode console``, answered
    in its acknowledgement, which only its sender sees): the link in a direct message."""
    store = host.database
    if not dm:
        return IN_A_GROUP
    if store is None or not isinstance(host, HasSettings):
        return NOT_ENABLED
    return await console_answer(store, host.settings, platform, user_id)


def is_console(text: str, bot_username: str | None) -> bool:
    """Whether a direct message is ``/console`` (or ``/console@thisbot``): the router's
    direct-message gate (``bots.router.with_dm_command``) asks this of every direct message
    and enters :func:`console_dm`'s answer for this one only."""
    return _is_console(text, bot_username)


def console_dm(client: PlatformClient, host: TurnHost
               ) -> Callable[[Any, Any], Awaitable[None]]:
    """The answer to ``/console`` in a direct message (see the module docstring), for the
    router's direct-message gate. ``ctx`` and ``d`` are the router's ``DispatchContext``
    and ``Dispatch``."""

    async def answer(ctx: Any, d: Any) -> None:
        ev: InboundEvent = d.event
        store = host.database
        if store is None or not isinstance(host, HasSettings):
            text = NOT_ENABLED
        else:
            text = await console_answer(store, host.settings, ev.platform, ev.sender)
        target = ev.target()
        target.extra.pop("start_thread", None)  # a direct message gets no thread
        try:
            for chunk in client.render(text):
                await client.send(target, chunk, plain=True)
        except Exception:
            log.warning("console.link_send_failed", platform=ev.platform, exc_info=True)
        await ctx.inbound.set_status(d.stored.id, "done", decision=f"command:{COMMAND}")

    return answer
