"""The operator console: a web UI inside ``geode serve`` over the same store and the same
approvals as the threads, signed in with the chat identity (a one-time link).

:class:`Console` is what ``geode serve`` hosts when ``[console] enabled = true``;
:func:`issue_link` makes a sign-in link (``geode console link``). Who sees
what: :mod:`bots.console.access`; the routes' security rules: :mod:`bots.console.app`.
"""

from __future__ import annotations

from bots.console.access import Access, Identity
from bots.console.links import issue_link
from bots.console.service import Console, ConsoleHost, base_url, signin_url

__all__ = ["Access", "Console", "ConsoleHost", "Identity", "base_url", "issue_link",
           "signin_url"]
