"""Making a sign-in link for a chat identity (``geode console link``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bots.console.access import Access, Identity
from bots.console.service import base_url, signin_url
from geode.errors import ConfigError

if TYPE_CHECKING:
    from geode.settings import Settings
    from geode.store.database import Database

__all__ = ["issue_link"]


async def issue_link(store: Database, settings: Settings, who: Identity, *, via: str,
                     base: str | None = None) -> str:
    """A one-time sign-in URL for ``who``, valid 10 minutes.

    Raises:
        ConfigError: ``who`` is neither an operator nor any binding's approver.
        ConsoleLinkLimitError: too many links for ``who`` in the last 10 minutes.
    """
    from bots.store import ConsoleLinks, StoredBindings

    access = Access.build(settings.console.operators,
                          [*settings.bindings, *await StoredBindings(store=store).list()])
    if not access.may_sign_in(who):
        raise ConfigError(
            f"{who} may not sign in to the console: add it to [console] operators, or to a "
            "binding's approvers")
    token = await ConsoleLinks(store=store).issue(who.platform, who.user_id, via=via)
    return signin_url(base or base_url(settings), token)
