"""The web chat: the chat-ops service in a browser, without any platform account.

A person signed in to the console (``bots.console``: the same one-time link, the same
session cookie) opens threads at ``/chat`` and talks to the bot through the very same layer
as on Slack, Discord or Telegram: each message is an :class:`~bots.events.InboundEvent` of
platform ``webchat``, bindings (``platform = "webchat"``) and their allow-lists apply,
approvals have buttons, the progress message is edited live (server-sent events), files go
in (upload) and out (download links), and /commands work.

Its "platform API" is the store (:class:`bots.store.WebChatRecords`): the connector's send,
edit, react, delete and upload are transactions, so what the bot sent survives a restart
and is shown once. :mod:`bots.webchat.connector` is the connector, :mod:`bots.webchat.routes`
the pages the console mounts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geode._imports import lazy_attributes

if TYPE_CHECKING:
    from bots.webchat.connector import WebChatConnector, build_connector
    from bots.webchat.options import WebChatOptions

__all__ = ["WebChatConnector", "WebChatOptions", "build_connector"]

# Nothing is imported here: the console's routes (bots.webchat.routes) are on the layer's
# side of the import graph, the connector is not.
_LAZY = {"WebChatConnector": "bots.webchat.connector",
         "WebChatOptions": "bots.webchat.options",
         "build_connector": "bots.webchat.connector"}

__getattr__ = lazy_attributes(__name__, _LAZY)
