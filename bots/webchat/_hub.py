"""Which web-chat connector serves a store in this process: the console's ``/chat`` routes
and the connector are two parts ``geode serve`` hosts side by side (each built by its own
registration), and the routes hand a person's message to the connector that runs on the
same store. Keyed by the store object, so two daemons in one process (tests) stay apart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from bots.store.webchat import WebChatMessage
    from bots.webchat.options import WebChatOptions

__all__ = ["ChatEndpoint", "connector_for", "register", "unregister"]


class ChatEndpoint(Protocol):
    """What the routes use of the connector (``bots.webchat.connector``)."""

    @property
    def opts(self) -> WebChatOptions: ...

    def upload_limit(self, *, image: bool) -> int: ...

    async def post(self, *, channel: str, thread_root: str | None, sender: str,
                   text: str, file: tuple[str, str, bytes] | None = None) -> WebChatMessage: ...

    async def click(self, *, channel: str, thread_root: str, message_id: int, sender: str,
                    verb: str, short_id: str) -> None: ...


_BY_STORE: dict[int, ChatEndpoint] = {}


def register(store: object, connector: ChatEndpoint) -> None:
    _BY_STORE[id(store)] = connector


def unregister(store: object, connector: ChatEndpoint) -> None:
    if _BY_STORE.get(id(store)) is connector:
        del _BY_STORE[id(store)]


def connector_for(store: object) -> ChatEndpoint | None:
    """The started web-chat connector on ``store``; None when the web chat is not served."""
    return _BY_STORE.get(id(store))
