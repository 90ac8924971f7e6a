"""GEODE's chat-ops channel layer and its platform connectors.

The platform-neutral layer (events, bindings, senders, durable inbound/outbound, progress,
formatting, commands, dispatcher) is shared; its records live in ``bots.store`` (the only
SQL of ``bots``); each platform plugs in as a :class:`BaseConnector` subclass (``bots.telegram``,
``bots.slack``, ``bots.discord``, or an outside package) through the channel port
(``bots.port``), and registers its :class:`~bots.options.PlatformSpec` in the ``geode.platforms``
entry point group (:mod:`bots.platforms`). :func:`build_connectors` turns ``[channels.*]``
into connectors for ``geode serve``.

The names below are imported when first used: the harness reads platform specs
(``bots.<platform>.options``) in every process, for the shapes of their secrets, and that
must not import the layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geode._imports import lazy_attributes

if TYPE_CHECKING:
    from bots.connector import BaseConnector
    from bots.console import Console
    from bots.events import Attachment, InboundEvent, ReplyTarget, thread_key
    from bots.format import Chunk
    from bots.layer import ChannelLayer
    from bots.options import LayerOptions
    from bots.port import DeliveryError, Intake, PlatformClient, TurnHost
    from geode.settings import Secrets, Settings

__all__ = [
    "Attachment",
    "BaseConnector",
    "ChannelLayer",
    "Chunk",
    "DeliveryError",
    "InboundEvent",
    "Intake",
    "LayerOptions",
    "PlatformClient",
    "ReplyTarget",
    "TurnHost",
    "build_connectors",
    "thread_key",
]

_LAZY = {
    "BaseConnector": "bots.connector", "Attachment": "bots.events",
    "InboundEvent": "bots.events", "ReplyTarget": "bots.events", "thread_key": "bots.events",
    "Chunk": "bots.format", "ChannelLayer": "bots.layer", "LayerOptions": "bots.options",
    "DeliveryError": "bots.port", "Intake": "bots.port", "PlatformClient": "bots.port",
    "TurnHost": "bots.port",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


def build_connectors(
    host: TurnHost, settings: Settings, secrets: Secrets
) -> list[BaseConnector | Console]:
    """The connectors ``[channels.*]`` enables (``geode serve`` adds each to the daemon), each
    built by its platform's spec (only the configured platforms' SDKs are imported), and the
    operator console when ``[console] enabled`` (hosted the same way: started once the store
    is open, stopped before it closes).

    Raises:
        ConfigError: a configured channel lacks its token, has an invalid option, or names
            no registered platform; :class:`~geode._imports.MissingExtraError` its SDK's extra
            is not installed.
    """
    from bots.connector import BaseConnector
    from bots.platforms import build_connector

    out: list[BaseConnector | Console] = []
    for name, raw in settings.channels.items():
        if raw.get("enabled", True):
            connector = build_connector(name, host=host, settings=settings, secrets=secrets,
                                        raw=raw)
            if not isinstance(connector, BaseConnector):
                raise TypeError(f"the {name} platform's builder made {connector!r}, not a "
                                "BaseConnector")
            out.append(connector)
    if settings.console.enabled:
        from bots.console import Console

        out.append(Console(host=host, settings=settings))
    return out
