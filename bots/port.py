"""The channel port: what a connector offers the layer, what the layer offers a connector,
and what the layer needs from the daemon.

* :class:`PlatformClient` — a connector's platform I/O as the layer's collaborators use it
  (send / edit / react / upload / typing / render / history). Only platform code implements
  it (:class:`~bots.connector.BaseConnector`); SDK errors arrive as :class:`DeliveryError`.
  What only some platforms can do is an ability Protocol (:class:`ApprovalControls`,
  :class:`ReadBack`, :class:`AttachmentReader`) the caller checks with ``isinstance``.
* :class:`Intake` — the narrow port a connector hands neutral inbound events to; the layer
  records them durably before the connector acknowledges them.
* :class:`TurnHost` — the harness port of ``geode serve`` plus exactly what the layer uses
  of the daemon: the database its records are built on and the publisher of its events.

Nothing here imports the layer or a connector: both depend on this module, never on each
other's internals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar, runtime_checkable

from bots.events import Attachment, InboundEvent, ReplyTarget
from bots.format import Chunk, human_size
from geode.daemon.port import HarnessPort

if TYPE_CHECKING:
    from datetime import datetime
    from pathlib import Path

    from prometheus_client import CollectorRegistry

    from bots.observed import ChannelEvent
    from bots.store import Cursors
    from geode.daemon.metrics import EventCounters
    from geode.settings import BindingSettings
    from geode.store.database import Database

    _Counters = TypeVar("_Counters", bound=EventCounters)

__all__ = [
    "ApprovalControls",
    "AttachmentReader",
    "AttachmentRefused",
    "DeliveryError",
    "DeliveryErrorKind",
    "Intake",
    "NativeStream",
    "PlatformClient",
    "ReadBack",
    "TurnHost",
    "UploadTooLarge",
]

DeliveryErrorKind = Literal["markup", "not_modified", "not_found", "retry", "unknown", "fatal"]


class DeliveryError(Exception):
    """A send/edit the platform refused or whose outcome is unknown.

    Kinds: ``markup`` (rejected formatting: resend as plain text), ``not_modified`` (an edit
    that changed nothing: the content is already there), ``not_found`` (the message to edit
    is gone), ``retry`` (rate limited beyond the limiter's patience; ``retry_after``),
    ``unknown`` (network failure after the request left: it may have taken effect),
    ``fatal`` (forbidden, chat gone: do not retry).
    """

    def __init__(
        self, kind: DeliveryErrorKind, message: str = "", *, retry_after: float | None = None
    ) -> None:
        super().__init__(message or kind)
        self.kind = kind
        self.retry_after = retry_after


class UploadTooLarge(DeliveryError):
    """A file over the platform's upload limit, refused before any byte was sent (never
    retried); the message names the file, its size and the limit."""

    def __init__(self, *, filename: str, size: int, limit: int, platform: str,
                 what: str = "files") -> None:
        super().__init__(
            "fatal",
            f"{filename} is {human_size(size)}: {platform} takes {what} up to "
            f"{human_size(limit)}",
        )
        self.filename = filename
        self.size = size
        self.limit = limit


class AttachmentRefused(Exception):
    """An attachment the layer will not read; the message (short, for the user) says why."""


class PlatformClient(Protocol):
    """One platform's messaging, as the layer's deliverer, progress and turns use it: the
    core every platform has (identity, send / edit / react / upload / typing, its renderer,
    the thread's history). What only some platforms can do is a small ability Protocol
    below (:class:`ApprovalControls`, :class:`ReadBack`, :class:`AttachmentReader`), which
    the caller checks with ``isinstance`` and falls back from when it is missing."""

    @property
    def platform(self) -> str: ...

    @property
    def workspace(self) -> str: ...

    async def send(self, target: ReplyTarget, chunk: Chunk, *, plain: bool = False) -> str: ...

    async def edit(
        self, target: ReplyTarget, message_id: str, chunk: Chunk, *, plain: bool = False
    ) -> None: ...

    async def react(self, target: ReplyTarget, message_id: str, emoji: str | None) -> None: ...

    async def upload(
        self, target: ReplyTarget, *, filename: str, data: bytes, caption: str | None = None,
        image: bool = False,
    ) -> str:
        """Post a file into the thread (``image``: as a photo where the platform makes the
        difference); returns the platform's message (or file) id.

        Raises:
            UploadTooLarge: over the platform's limit (checked before anything is sent).
            DeliveryError: translated platform failure.
        """
        ...

    def upload_limit(self, *, image: bool) -> int:
        """The largest file (bytes) :meth:`upload` takes; 0: none."""
        ...

    async def typing(self, target: ReplyTarget) -> None: ...

    def render(self, markdown: str) -> list[Chunk]: ...

    def render_progress(self, text: str) -> Chunk: ...

    async def fetch_thread_history(self, event: InboundEvent) -> list[InboundEvent]: ...

    def bot_user_id(self) -> str | None: ...

    def bot_username(self) -> str | None: ...


@runtime_checkable
class ApprovalControls(Protocol):
    """A platform with native Approve / Deny controls (buttons). Without this ability an
    approval request is a plain message answered with ``/approve ID`` / ``/deny ID``, and a
    command's private answer has nowhere to go."""

    async def send_approval(self, target: ReplyTarget, chunk: Chunk, *, short_id: str) -> str:
        """Post an approval request with the platform's Approve / Deny controls; a click
        arrives as an inbound ``/approve ID`` / ``/deny ID`` command."""
        ...

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        """Answer a click on a control (``event.extra["action"]``) the platform's way."""
        ...


@runtime_checkable
class ReadBack(Protocol):
    """A platform whose API reads back what the bot posted (Telegram's Bot API cannot), so
    a send a kill hid before it was recorded is found instead of guessed."""

    async def find_upload(
        self, target: ReplyTarget, *, filename: str, size: int, since: datetime
    ) -> str | None:
        """The id :meth:`PlatformClient.upload` returned for a file of this name and size
        the bot posted in the thread since ``since``, or None when there is none.

        Raises:
            DeliveryError: the lookup failed.
        """
        ...

    async def find_approval(
        self, target: ReplyTarget, *, short_id: str, since: datetime
    ) -> str | None:
        """The id of the approval request ``short_id`` the bot posted in the thread since
        ``since``, or None when there is none (the request is then posted again).

        Raises:
            DeliveryError: the lookup failed.
        """
        ...


@runtime_checkable
class NativeStream(Protocol):
    """A platform whose API writes a message as it grows (Slack's chat streaming: start,
    append, stop). The layer's :class:`bots.turn.native.NativePages` streams a turn's draft
    through it into a message that replaces the progress message (recorded as the turn's
    progress message before anything is appended), and into a new one at the platform's
    limit (recorded before it grows); it falls back to paced edits where :meth:`can_stream`
    says no or the platform refuses. The final answer still replaces each message by an
    ordinary :meth:`PlatformClient.edit`, which ends a stream still open."""

    def can_stream(self, target: ReplyTarget) -> bool:
        """Whether a stream may be tried in this thread (the platform refused none here)."""
        ...

    async def start_stream(self, target: ReplyTarget, markdown: str) -> str:
        """A new message in the thread, streaming, holding ``markdown``; its id.

        Raises:
            DeliveryError: refused (``fatal``: not here; the thread is then marked so that
                :meth:`can_stream` says no) or outcome unknown.
        """
        ...

    async def append_stream(self, target: ReplyTarget, message_id: str, markdown: str) -> None:
        """Append ``markdown`` to the streaming message (``fatal``: it streams no more)."""
        ...

    async def stop_stream(self, target: ReplyTarget, message_id: str) -> None:
        """End the stream; its text stays as it is (an edit may then replace it)."""
        ...

    async def delete_message(self, target: ReplyTarget, message_id: str) -> None:
        """Remove a message the bot posted (one already gone is no error)."""
        ...


@runtime_checkable
class AttachmentReader(Protocol):
    """A platform whose attachments the layer can download."""

    async def download(self, attachment: Attachment, dest: Path, *, max_bytes: int) -> int:
        """Write the attachment's bytes to ``dest``; returns the size. Raises
        :class:`AttachmentRefused` (nothing beyond ``max_bytes`` is read) or
        :class:`DeliveryError`."""
        ...


class Intake(Protocol):
    """The layer as platform code sees it: where a connector hands its neutral events, and
    the few records it reads by name (its bindings, its cursors, which thread a message
    belongs to). Never a table."""

    async def submit(
        self, events: Sequence[tuple[InboundEvent, str]], *, cursor: tuple[str, str] | None = None
    ) -> list[int]:
        """Record ``events`` (and move ``cursor``) in one transaction before returning, i.e.
        before the platform is acknowledged."""
        ...

    @property
    def cursors(self) -> Cursors:
        """Named durable read positions (catch-up watermarks, poll offsets)."""
        ...

    async def binding_for(
        self, platform: str, workspace: str, channel: str
    ) -> BindingSettings | None: ...

    def bound_channels(self, platform: str) -> list[BindingSettings]: ...

    async def refresh_bindings(self) -> None:
        """Re-read the stored bindings now (before a catch-up)."""
        ...

    async def thread_of(
        self, platform: str, workspace: str, channel: str, message_id: str
    ) -> str | None:
        """The root of the thread a seen or sent message belongs to."""
        ...

    async def latest_thread(self, platform: str, workspace: str, channel: str) -> str | None:
        """The channel's thread with the newest running turn, else its newest thread."""
        ...

    async def engaged_roots(
        self, platform: str, workspace: str, channel: str, *, limit: int
    ) -> list[str]: ...

    async def known_keys(self, dedupe_keys: Sequence[str]) -> set[str]:
        """Which of these events are recorded already."""
        ...


class TurnHost(HarnessPort, Protocol):
    """What the layer needs from ``geode serve`` (``geode.daemon.Daemon`` is one): the
    harness port, the database the channel records are built on, the publisher of the
    channels' events, the counters the layer increments on ``/metrics``, and how many
    channel turns may run at once. Never the runtime."""

    @property
    def database(self) -> Database | None:
        """None until the daemon opened its store."""
        ...

    def publish(self, event: ChannelEvent) -> None:
        """Tell the daemon's observers (shell hooks, plugins, traces) of a channel's event;
        they decide nothing. The layer's metrics are not among them (:meth:`add_metrics`)."""
        ...

    def add_metrics(self, build: Callable[[CollectorRegistry], _Counters]) -> _Counters:
        """The layer's counters on the daemon's ``/metrics``: ``build`` registers them on the
        daemon's registry once per daemon (every connector's layer asks; the first one builds
        them, the others get the same instance), and the instance is returned. The layer
        hands it to the components that count, which increment it inline; it observes
        nothing :meth:`publish` carries."""
        ...

    @property
    def channel_capacity(self) -> int: ...
