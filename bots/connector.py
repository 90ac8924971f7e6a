"""BaseConnector: what a platform must provide; the shared layer does the rest.

A platform subclass implements ``connect`` (log in, learn its identity, start its intake,
which hands neutral events to :meth:`BaseConnector.submit`), ``disconnect``, ``send``,
``edit``, ``render`` and ``render_progress`` (its own markup, ``bots/<platform>/``).
``react``, ``typing``, ``fetch_thread_history`` and ``catch_up`` have harmless defaults.
Platform code reaches the layer only through :attr:`BaseConnector.intake` (the narrow
:class:`bots.port.Intake`: record events, bindings, cursors, thread lookups by name); it
never touches a table. Bindings, sender policy, sessions, durability, progress and commands
live in the layer (:mod:`bots.layer`) and are the same for every platform.

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
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import ClassVar

import structlog

from bots._aio import reap
from bots.events import Attachment, InboundEvent, ReplyTarget
from bots.format import Chunk
from bots.layer import ChannelLayer
from bots.holders import registry_for
from bots.options import LayerOptions
from bots.port import (
    AttachmentRefused,
    DeliveryError,
    DeliveryErrorKind,
    Intake,
    TurnHost,
    UploadTooLarge,
)
from bots.store import ChannelStore, Lease
from geode.settings import BindingSettings

__all__ = ["BaseConnector", "DeliveryError", "DeliveryErrorKind", "TurnHost", "reap"]

log = structlog.get_logger(__name__)

def instance_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class BaseConnector(ABC):
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
        #: test seam: called with a pipeline point name (a test raises there = a crash)
        self.fault: Callable[[str], None] | None = fault
        #: the bot's intake lease (set by the subclass in :meth:`connect`): its holder
        #: polls / catches up; every replica processes (per-thread leases, see the layer)
        self.lease: Lease | None = None
        #: True while another replica holds :attr:`lease` and this one waits for the intake
        self.standby = False
        self._ready = False

    # -- lifecycle (the daemon's Connector protocol) ----------------------------------------

    @property
    def ready(self) -> bool:
        return self._ready

    async def start(self) -> None:
        """Build the layer on the daemon's store, connect, then process (every replica)."""
        runtime = self.host.runtime
        if runtime is None or runtime.store is None:
            raise RuntimeError("connectors start after the daemon opened its store")
        records = ChannelStore(store=runtime.store, owner=self.owner,
                               lease_ttl_s=self.options.lease_ttl_s,
                               pairing_max_new_per_hour=self.options.pairing_max_new_per_hour,
                               predecessors=predecessors)
        self.records = records
        # The layer gets this connector's platform I/O as the PlatformClient port (send,
        # edit, render, identity), nothing of its lifecycle or intake.
        self.layer = ChannelLayer(client=self, records=records, host=self.host,
                                  bindings=self.bindings, options=self.options,
                                  fault=self.fault)
        await self.connect()
        await self.layer.start_processing()
        self._ready = True
        log.info("connector.started", platform=self.platform, workspace=self.workspace)

    async def stop(self) -> None:
        """Stop taking events, stop processing (turns in flight are left to the daemon)."""
        self._ready = False
        try:
            await self.disconnect()
        finally:
            if self.layer is not None:
                await self.layer.stop()
        log.info("connector.stopped", platform=self.platform)

    @property
    def intake(self) -> Intake:
        """The layer's narrow port for platform code: record events, read bindings, cursors
        and thread lookups by name (never a table)."""
        if self.layer is None:
            raise RuntimeError("the connector has not started")
        return self.layer

    async def submit(
        self, events: Sequence[tuple[InboundEvent, str]], *, cursor: tuple[str, str] | None = None
    ) -> list[int]:
        """Record events durably (and move ``cursor``) before the caller acknowledges them."""
        return await self.intake.submit(events, cursor=cursor)

    # -- intake lease (shared by the platforms' supervisors) -------------------------------------
        # This home's holders whose process died (a kill -9 before this restart): their
        # leases are ours at once, not after their TTL (bots.holders; a few syscalls, once).
        predecessors = registry_for(self.host.home).register(self.owner)

    def start_supervisor(
        self, *, lease_name: str, ttl_s: float, work: Callable[[], Awaitable[None]] | None = None
    ) -> asyncio.Task[None]:
        """Create :attr:`lease` (store lease ``lease_name``) and run :meth:`supervise` on it."""
        assert self.records is not None
        self.lease = self.records.lease(name=lease_name, ttl_s=ttl_s)
        return asyncio.create_task(self.supervise(period=max(0.05, ttl_s / 3), work=work),
                                   name=f"{self.platform}-main")

    async def supervise(
        self, *, period: float, work: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Hold :attr:`lease` (or wait as a standby for it); while held, run the intake.

        The intake is :meth:`catch_up`, then ``work`` (e.g. Telegram's ``getUpdates`` loop),
        in one task while the lease is renewed every ``period`` seconds. Losing the lease
        cancels that task: only the holder may poll. A failure ends it too, and it starts
        again after ``period``. Processing is not tied to this lease (every replica
        processes the threads it holds).
        """
        assert self.lease is not None
        while True:
            if not await self.lease.try_acquire():
                if not self.standby:
                    log.info("connector.standby", platform=self.platform,
                             holder=await self.lease.holder())
                self.standby = True
                await asyncio.sleep(period)
                continue
            self.standby = False
            log.info("connector.lease_acquired", platform=self.platform,
                     workspace=self.workspace)
            task = asyncio.create_task(self._intake_work(work), name=f"{self.platform}-intake")
            try:
                while not task.done():
                    await asyncio.wait({task}, timeout=period)
                    if task.done():
                        break
                    # renewed well before expiry (period is a third of the TTL)
                    if not await self.lease.try_acquire():
                        log.warning("connector.lease_lost", platform=self.platform,
                                    workspace=self.workspace)
                        break
            finally:
                failed = task.done() and not task.cancelled() and task.exception() is not None
                await reap(task)
            if failed:
                log.error("connector.intake_failed", platform=self.platform,
                          error=repr(task.exception()))
                await asyncio.sleep(period)

    async def _intake_work(self, work: Callable[[], Awaitable[None]] | None) -> None:
        await self.catch_up()
        if work is not None:
            await work()
        else:
            await asyncio.Event().wait()  # hold the lease (catch-up is done once per hold)

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

    async def send_approval(self, target: ReplyTarget, chunk: Chunk, *, short_id: str) -> str:
        """An approval request; without native controls it is a message answered with
        ``/approve`` / ``/deny`` (platforms with buttons override this)."""
        return await self.send(target, chunk)

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        """Answer a click on a native control (nothing to do without them)."""
        return None

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

    async def find_upload(
        self, target: ReplyTarget, *, filename: str, size: int, since: datetime
    ) -> str | None:
        """A file the bot posted in the thread since ``since`` (see the port). Default: the
        platform cannot read back what the bot posted."""
        raise DeliveryError("unknown", f"{self.platform} cannot read back what the bot posted")

    async def find_approval(
        self, target: ReplyTarget, *, short_id: str, since: datetime
    ) -> str | None:
        """An approval request the bot posted in the thread (see the port). Default: the
        platform cannot read back what the bot posted, so none is found."""
        return None

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

    async def download(self, attachment: Attachment, dest: Path, *, max_bytes: int) -> int:
        """Save an attachment's bytes to ``dest``. Default: this platform cannot."""
        raise AttachmentRefused("files from this platform are not read yet")

    async def catch_up(self) -> None:
        """Fetch what was missed while down (history APIs). Default: the intake's backlog."""
        return None
