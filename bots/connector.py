"""BaseConnector: what a platform must provide; the shared layer does the rest.

A platform subclass implements ``connect`` (log in, learn its identity, start its intake,
which hands neutral events to :meth:`BaseConnector.submit`), ``disconnect``, ``send``,
``edit``, ``render`` and ``render_progress`` (its own markup, ``bots/<platform>/``).
``react``, ``typing``, ``fetch_thread_history`` and ``catch_up`` have harmless defaults.
Platform code reaches the layer only through :attr:`BaseConnector.intake` (the narrow
:class:`bots.port.Intake`: record events, bindings, cursors, thread lookups by name); it
never touches a table. Bindings, sender policy, sessions, durability, progress and commands
live in the layer (:mod:`bots.layer`) and are the same for every platform.

The intake lease every platform holds (one replica takes the updates, the others stand by)
is :mod:`bots._intake_lease`, a mixin of the base.

SDK errors are translated once, in the subclass, into :class:`DeliveryError` kinds; the
layer's retry and fallback logic only sees those.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, cast

import structlog

from bots._aio import reap
from bots._intake_lease import IntakeLeaseHolder
from bots.events import InboundEvent, ReplyTarget
from bots.format import Chunk
from bots.holders import registry_for
from bots.layer import ChannelLayer
from bots.options import LayerOptions
from bots.port import (
    DeliveryError,
    DeliveryErrorKind,
    Intake,
    TurnHost,
    UploadTooLarge,
)
from bots.store import ChannelStore, Lease
from geode.daemon.supervisor import Backoff, Component, TaskSupervisor, describe_error
from geode.errors import ConfigError, GeodeError
from geode.settings import BindingSettings

__all__ = [
    "CONNECT_BACKOFF",
    "BaseConnector",
    "DeliveryError",
    "DeliveryErrorKind",
    "PlatformUnreachableError",
    "TurnHost",
    "reap",
]

log = structlog.get_logger(__name__)

#: the connect loop's pace while a platform cannot be reached: 1, 2, 4, ... 60 s (±30%)
CONNECT_BACKOFF = Backoff(initial_s=1.0, max_s=60.0)


class PlatformUnreachableError(Exception):
    """The platform's API could not be reached (network, DNS, timeout, 5xx): transient,
    never a configuration error. The message says where and what to check; the cause is
    the SDK's error."""


class _NotStarted:
    """:attr:`BaseConnector.intake` before :meth:`BaseConnector.start` built the layer."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("the connector has not started")


_NOT_STARTED = cast(Intake, _NotStarted())


def instance_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class BaseConnector(IntakeLeaseHolder, ABC):
    """A platform connector hosted by the daemon (``Daemon.add_connector``).

    Args:
        host: the daemon (runs turns under its lanes; owns the store).
        bindings: the configured ``[[bindings]]`` (stored ones are added by the layer).
        options: layer behaviour (progress cadence, catch-up age, ...).
        fault: test seam, called at named points of the pipeline.
    """

    platform: ClassVar[str]
    #: the platform's message length limit (UTF-16 units for Telegram)
    text_limit: ClassVar[int]

    def __init__(
        self,
        *,
        host: TurnHost,
        bindings: Sequence[BindingSettings] = (),
        options: LayerOptions | None = None,
        fault: Callable[[str], None] | None = None,
    ) -> None:
        self.host = host
        self.bindings = [b for b in bindings if b.platform == self.platform]
        self.options = options or LayerOptions()
        self.owner = instance_name()
        #: identity inside the platform (Telegram: the bot id); part of session ids
        self.workspace = ""
        #: the channel records (built at :meth:`start` on the daemon's store): the intake
        #: lease comes from here, never from the layer
        self.records: ChannelStore | None = None
        #: the layer this connector feeds (platform code uses :attr:`intake` only)
        self.layer: ChannelLayer | None = None
        #: the layer's narrow port for platform code: record events, read bindings, cursors
        #: and thread lookups by name (never a table). Set by :meth:`start`; a plain value, so
        #: platform code records an event with one call into the intake
        self.intake: Intake = _NOT_STARTED
        #: test seam: called with a pipeline point name (a test raises there = a crash)
        self.fault: Callable[[str], None] | None = fault
        #: the bot's intake lease (set by the subclass in :meth:`connect`): its holder
        #: polls / catches up; every replica processes (per-thread leases, see the layer)
        self.lease: Lease | None = None
        #: True while another replica holds :attr:`lease` and this one waits for the intake
        self.standby = False
        self._ready = False
        self._connected = False
        #: every long-running task of this connector and its layer (poller, gateway,
        #: pump, lease keeper, connect loop): restarted when it dies, health on /readyz
        self.supervisor = TaskSupervisor()
        self.connection = self.supervisor.component(f"{self.platform}.connection")
        #: the intake's health (registered by :meth:`start_supervisor`)
        self.intake_health = Component(name=f"{self.platform}.intake")
        #: the connect loop's pace while the platform cannot be reached
        self.connect_backoff = CONNECT_BACKOFF

    # -- lifecycle (the daemon's Connector protocol) ----------------------------------------

    @property
    def ready(self) -> bool:
        return self._ready

    async def start(self) -> None:
        """Build the layer on the daemon's store, connect, then process (every replica).

        A platform that cannot be reached (network down, DNS, 5xx, a timeout) is not a
        configuration error: the connector stays not-ready (``/readyz`` says why, under
        ``<platform>.connection``) and connects by itself, retried with exponential backoff
        and jitter. A credential the platform rejects at this first attempt is a
        :class:`~geode.errors.ConfigError` (``geode serve`` exits 2: retrying cannot fix a
        wrong token); the same rejection later, while running, is retried like an outage.
        """
        database = self.host.database
        if database is None:
            raise RuntimeError("connectors start after the daemon opened its store")
        # This home's holders whose process died (a kill -9 before this restart): their
        # leases are ours at once, not after their TTL (bots.holders; a few syscalls, once).
        predecessors = registry_for(self.host.home).register(self.owner)
        records = ChannelStore(store=database, owner=self.owner,
                               lease_ttl_s=self.options.lease_ttl_s,
                               pairing_max_new_per_hour=self.options.pairing_max_new_per_hour,
                               predecessors=predecessors)
        self.records = records
        # The layer gets this connector's platform I/O as the PlatformClient port (send,
        # edit, render, identity), nothing of its lifecycle or intake.
        self.layer = ChannelLayer(client=self, records=records, host=self.host,
                                  bindings=self.bindings, options=self.options,
                                  fault=self.fault, supervisor=self.supervisor)
        self.intake = self.layer.intake
        self.connection = self.supervisor.component(f"{self.platform}.connection")
        try:
            await self._connect_and_process()
        except PlatformUnreachableError as exc:
            self._connect_failed(exc, attempt=1)
            self.supervisor.spawn(f"{self.platform}.connect", self._connect_until_up,
                                  once=True)

    async def _connect_and_process(self) -> None:
        if not self._connected:
            await self.connect()
            self._connected = True
        assert self.layer is not None
        await self.layer.start_processing()
        self._ready = True
        self.connection.beat(f"connected (workspace {self.workspace})")
        log.info("connector.started", platform=self.platform, workspace=self.workspace)

    def _connect_failed(self, exc: Exception, *, attempt: int) -> float:
        """Say why the connector is not up (one line per failed attempt, /readyz); the pause
        before the next attempt."""
        delay = self.connect_backoff.delay(attempt)
        why = describe_error(exc.__cause__ or exc) if isinstance(exc, PlatformUnreachableError) \
            else describe_error(exc)
        shown = str(exc) if isinstance(exc, GeodeError | PlatformUnreachableError) else why
        self.connection.down(f"{shown} (attempt {attempt}; next in {delay:.1f}s)")
        log.warning("connector.connect_failed", platform=self.platform, attempt=attempt,
                    error_class=type(exc.__cause__ or exc).__name__, error=why,
                    retry_in_s=round(delay, 2))
        return delay

    async def _connect_until_up(self, component: Component) -> None:
        """The connect loop (supervised, ``once``): until the platform answers and
        processing runs. Every failure is retried: the service keeps running meanwhile
        (``<platform>.connection`` on /readyz says why it is not up)."""
        component.beat("retrying the connection")
        attempt = 1
        delay = self.connect_backoff.delay(attempt)
        while True:
            await asyncio.sleep(delay)
            attempt += 1
            try:
                await self._connect_and_process()
                return
            except ConfigError as exc:
                # Rejected after the first attempt (a token revoked while the platform was
                # unreachable, a proxy's 401): said loudly, retried at the slowest pace.
                log.error("connector.credentials_rejected", platform=self.platform,
                          error=str(exc))
                self.connection.down(f"{exc} (retrying every {self.connect_backoff.max_s:.0f}s)")
                delay = self.connect_backoff.max_s
            except Exception as exc:  # unreachable, or the store failed: retried
                delay = self._connect_failed(exc, attempt=attempt)

    async def stop(self) -> None:
        """Stop taking events, stop processing (turns in flight are left to the daemon)."""
        self._ready = False
        await self.supervisor.cancel(f"{self.platform}.connect")
        try:
            await self.disconnect()
        finally:
            if self.layer is not None:
                await self.layer.stop()
            await self.supervisor.stop()
        log.info("connector.stopped", platform=self.platform)

    async def quiesce(self) -> None:
        """SIGTERM's first step: take no new work, keep delivering.

        The connect loop and the intake (poller, catch-up, the intake lease's loop) stop and
        the pump stops claiming; events the platform still pushes are recorded for the next
        start. Running turns go on and deliver their answers (the daemon waits for
        :attr:`idle` within its drain bound, then calls :meth:`stop`).
        """
        await self.supervisor.cancel(f"{self.platform}.connect")
        await self.supervisor.cancel(f"{self.platform}.intake")
        if self.layer is not None:
            await self.layer.stop_claiming()

    @property
    def idle(self) -> bool:
        """Nothing of this connector runs (no turn, command or delivery under way)."""
        return self.layer is None or self.layer.idle

    def readiness(self) -> tuple[bool, str]:
        """(ready, why) for ``/readyz``'s ``connectors`` check."""
        if self.ready:
            return True, f"{self.platform}: connected"
        if self._ready:  # e.g. Discord before READY, or after its gateway gave up
            return False, f"{self.platform}: connected, but its event stream is not up"
        return False, f"{self.platform}: {self.connection.status()[1]}"

    async def submit(
        self, events: Sequence[tuple[InboundEvent, str]], *, cursor: tuple[str, str] | None = None
    ) -> list[int]:
        """Record events durably (and move ``cursor``) before the caller acknowledges them."""
        return await self.intake.submit(events, cursor=cursor)

    async def release_processing(self) -> None:
        """Stop processing and give the leases up (``disconnect``; never raises on release)."""
        if self.layer is not None:
            await self.layer.stop_processing()
        if self.lease is not None and self.lease.held:
            with contextlib.suppress(Exception):
                await self.lease.release()

    # -- platform I/O -------------------------------------------------------------------------

    @abstractmethod
    async def connect(self) -> None:
        """Log in, set :attr:`workspace`, start the intake (which calls :meth:`submit`).

        A single intake (Telegram's poller, catch-up) runs under :meth:`start_supervisor`;
        processing starts after ``connect`` returns, on every replica.
        """

    @abstractmethod
    async def disconnect(self) -> None:
        """Stop the intake and release platform resources."""

    @abstractmethod
    async def send(self, target: ReplyTarget, chunk: Chunk, *, plain: bool = False) -> str:
        """Post ``chunk`` (``plain``: its plain text) into the thread; returns the message id.

        Raises:
            DeliveryError: translated platform failure.
        """

    @abstractmethod
    async def edit(
        self, target: ReplyTarget, message_id: str, chunk: Chunk, *, plain: bool = False
    ) -> None:
        """Replace the text of one of the bot's messages.

        Raises:
            DeliveryError: translated platform failure (``not_modified`` included).
        """

    # -- files out ----------------------------------------------------------------------------

    def upload_limit(self, *, image: bool) -> int:
        """The largest file (bytes) :meth:`upload` takes here; 0: this platform cannot."""
        return 0

    async def upload(
        self, target: ReplyTarget, *, filename: str, data: bytes, caption: str | None = None,
        image: bool = False,
    ) -> str:
        """Post a file into the thread; returns the platform's message (or file) id.

        The size is checked against :meth:`upload_limit` before anything leaves.

        Raises:
            UploadTooLarge: over the limit (a ``fatal`` :class:`DeliveryError`).
            DeliveryError: translated platform failure.
        """
        limit = self.upload_limit(image=image)
        if limit <= 0:
            raise DeliveryError("fatal", f"{self.platform} connector cannot upload files")
        if len(data) > limit:
            raise UploadTooLarge(filename=filename, size=len(data), limit=limit,
                                 platform=self.platform.capitalize(),
                                 what="photos" if image else "files")
        return await self.post_file(target, filename=filename, data=data, caption=caption,
                                    image=image)

    async def post_file(
        self, target: ReplyTarget, *, filename: str, data: bytes, caption: str | None,
        image: bool,
    ) -> str:
        """The platform's upload (size already checked). Default: cannot."""
        raise DeliveryError("fatal", f"{self.platform} connector cannot upload files")

    @abstractmethod
    def render(self, markdown: str) -> list[Chunk]:
        """The model's Markdown as this platform's message chunks, each in the platform's
        own markup with its fallback, within :attr:`text_limit`; the layer stores and
        delivers them as they are (renderers: ``bots/<platform>/``)."""

    @abstractmethod
    def render_progress(self, text: str) -> Chunk:
        """Plain progress lines (``Working…``, a tool's name and mark) in the platform's
        markup, escaped as that markup needs."""

    def bot_user_id(self) -> str | None:
        """The bot's own user id on the platform (self-ignore)."""
        return None

    def bot_username(self) -> str | None:
        """The bot's handle, for ``/cmd@handle`` commands."""
        return None

    async def react(self, target: ReplyTarget, message_id: str, emoji: str | None) -> None:
        """Set (or clear, with None) the bot's reaction on a message. Default: nothing."""
        return None

    async def typing(self, target: ReplyTarget) -> None:
        """Show a typing / working indicator in the thread. Default: nothing."""
        return None

    async def fetch_thread_history(self, event: InboundEvent) -> list[InboundEvent]:
        """Earlier messages of the event's thread the platform API exposes. Default: none."""
        return []

    async def catch_up(self) -> None:
        """Fetch what was missed while down (history APIs). Default: the intake's backlog."""
        return None
