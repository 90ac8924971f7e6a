"""The platform-neutral inbound event, and where a reply goes.

Connectors translate their SDK's payloads into :class:`InboundEvent` at the boundary; the
rest of the layer (bindings, senders, sessions, dispatcher) never sees a platform object.
An event is stored as JSON in ``channel_events.payload`` and rebuilt with
:meth:`InboundEvent.from_json`, so recovery after a restart works on exactly what was
recorded.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

__all__ = ["Attachment", "InboundEvent", "ReplyTarget", "thread_key"]


def thread_key(platform: str, workspace: str, channel: str, thread_root: str) -> str:
    """The fixed session id of a thread: ``platform:workspace:channel:thread_root``."""
    return f"{platform}:{workspace}:{channel}:{thread_root}"


@dataclass(frozen=True, kw_only=True)
class Attachment:
    """A file that came with a message (fetched only when a tool asks for it)."""

    name: str = ""
    mime: str = ""
    size: int = 0
    ref: str = ""  # platform file id / URL
    #: what the platform called it ("voice", "audio", "document", ...; "" not said)
    kind: str = ""
    #: seconds of sound the platform declares for a voice note or audio file (0: not said)
    duration: int = 0


@dataclass(frozen=True, kw_only=True)
class ReplyTarget:
    """Where replies of one thread go, in the platform's own terms.

    ``extra`` carries what only the connector understands (Telegram: ``message_thread_id``
    of a forum topic); the layer stores and hands it back untouched.
    """

    channel: str
    thread_root: str
    reply_to: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReplyTarget:
        return cls(
            channel=str(data.get("channel", "")),
            thread_root=str(data.get("thread_root", "")),
            reply_to=None if data.get("reply_to") is None else str(data["reply_to"]),
            extra=dict(data.get("extra") or {}),
        )


@dataclass(frozen=True, kw_only=True)
class InboundEvent:
    """One message (or edit) from a platform, normalised.

    Attributes:
        dedupe_key: unique per platform event (Telegram: chat + message id [+ edit date]);
            persisted before the event is acknowledged.
        thread_root: the message id that roots the thread; the session is derived from it.
        mentions_bot: the bot was addressed (mention, command to it, reply to its message).
        reply_to: the message this one replies to, if any.
        date: the platform's timestamp (Unix seconds), for catch-up age limits.
        extra: connector-private routing data (copied into :class:`ReplyTarget`).
    """

    platform: str
    workspace: str
    channel: str
    thread_root: str
    message_id: str
    sender: str
    dedupe_key: str
    text: str = ""
    sender_name: str = ""
    sender_is_bot: bool = False
    mentions_bot: bool = False
    reply_to: str | None = None
    reply_to_bot: bool = False
    is_edit: bool = False
    is_dm: bool = False
    date: int = 0
    attachments: tuple[Attachment, ...] = ()
    context: tuple[str, ...] = ()  # earlier thread messages the payload itself carried
    extra: dict[str, Any] = field(default_factory=dict)
    #: the fixed session id of its thread (:func:`thread_key`), and whether the message roots
    #: that thread: stored on the value as it is made, so that the router and each phase of
    #: the turn read them instead of deriving them again (not recorded: :meth:`from_json`
    #: makes them anew)
    thread_key: str = field(init=False, repr=False, compare=False)
    starts_thread: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: set once, here
        set_(self, "thread_key",
             thread_key(self.platform, self.workspace, self.channel, self.thread_root))
        set_(self, "starts_thread", self.thread_root == self.message_id)

    def target(self) -> ReplyTarget:
        return ReplyTarget(
            channel=self.channel,
            thread_root=self.thread_root,
            reply_to=self.message_id,
            extra=dict(self.extra),
        )

    def with_thread(self, thread_root: str) -> InboundEvent:
        return replace(self, thread_root=thread_root)

    def to_json(self) -> dict[str, Any]:
        # Field by field rather than ``asdict`` (which deep-copies every value through its
        # generic recursion): only ``extra`` is a nested, mutable value.
        data = {name: getattr(self, name) for name in _EVENT_FIELDS}
        data["attachments"] = [asdict(a) for a in self.attachments]
        data["context"] = list(self.context)
        data["extra"] = copy.deepcopy(self.extra)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InboundEvent:
        known = _EVENT_FIELDS
        kw = {k: v for k, v in data.items() if k in known}
        kw["attachments"] = tuple(Attachment(**a) for a in data.get("attachments") or ())
        kw["context"] = tuple(data.get("context") or ())
        kw["extra"] = dict(data.get("extra") or {})
        return cls(**kw)


#: what an event is made of (and recorded as); the rest is derived from it
_EVENT_FIELDS = tuple(f.name for f in fields(InboundEvent) if f.init)
