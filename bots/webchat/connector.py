"""The web chat's connector: its platform API is the store.

Inbound: a signed-in person's message (``bots.webchat.routes``) is written to
``webchat_messages`` unsubmitted, handed to the layer's intake as an
:class:`~bots.events.InboundEvent` (``platform = "webchat"``, dedupe key
``webchat:<message id>``), then marked submitted; a crash in between is repaired at the next
start (:meth:`WebChatConnector.connect` submits what is left; the intake's dedupe key
refuses a second record). A click on an approval button is an inbound ``/approve ID`` /
``/deny ID`` from the clicker, like Slack's and Telegram's buttons.

Outbound: send / edit / react / delete / upload are single transactions on the store (each
appends to the thread's change log, which the browser follows), so a message the layer
recorded as sent is there after any restart, once; where a kill hid a send's id, the thread
is read back (:class:`~bots.port.ReadBack`).
"""

from __future__ import annotations

import asyncio
import mimetypes
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from bots.connector import BaseConnector
from bots.events import Attachment, InboundEvent, ReplyTarget
from bots.format import Chunk
from bots.port import AttachmentRefused, DeliveryError
from bots.render import split_markdown_source
from bots.store import WebChatRecords
from bots.webchat import _hub
from bots.webchat.options import WORKSPACE, WebChatOptions

if TYPE_CHECKING:
    from datetime import datetime

    from bots.port import TurnHost
    from bots.store.webchat import WebChatMessage
    from geode.settings import BindingSettings, Secrets, Settings

__all__ = ["WebChatConnector", "build_connector"]

log = structlog.get_logger(__name__)

def _message_id(message_id: str) -> int:
    try:
        return int(message_id)
    except ValueError:
        raise DeliveryError("not_found", f"no web-chat message {message_id!r}") from None


class WebChatConnector(BaseConnector):
    """The web chat. See the module docstring.

    Args:
        host: the daemon.
        bindings: configured bindings (non-webchat ones are dropped).
        options: ``[channels.webchat]``.
        fault: test seam, called at named points of the pipeline.
    """

    platform = "webchat"
    text_limit = 4000

    def __init__(
        self,
        *,
        host: TurnHost,
        bindings: Sequence[BindingSettings] = (),
        options: WebChatOptions | None = None,
        fault: Callable[[str], None] | None = None,
    ) -> None:
        opts = options or WebChatOptions()
        super().__init__(host=host, bindings=bindings, options=opts, fault=fault)
        self.opts = opts
        self.chat: WebChatRecords | None = None

    def bot_user_id(self) -> str | None:
        return "geode"

    def bot_username(self) -> str | None:
        return "geode"

    # -- lifecycle -----------------------------------------------------------------------------

    async def connect(self) -> None:
        database = self.host.database
        if database is None:
            raise RuntimeError("the web chat starts after the daemon opened its store")
        self.workspace = WORKSPACE
        self.chat = WebChatRecords(store=database)
        left = await self.chat.unsubmitted()
        for message in left:  # a crash fell between the record and the intake
            await self._submit(message)
        if left:
            log.info("webchat.resubmitted", messages=len(left))
        _hub.register(database, self)

    async def disconnect(self) -> None:
        if self.host.database is not None:
            _hub.unregister(self.host.database, self)
        await self.release_processing()

    # -- a person's side (the routes call these) -----------------------------------------------

    def _records(self) -> WebChatRecords:
        if self.chat is None:
            raise RuntimeError("the web chat has not started")
        return self.chat

    async def post(self, *, channel: str, thread_root: str | None, sender: str,
                   text: str, file: tuple[str, str, bytes] | None = None) -> WebChatMessage:
        """A person's message into a thread (``thread_root`` None: a new thread): recorded,
        then handed to the layer."""
        message = await self._records().post(channel=channel, thread_root=thread_root,
                                             sender=sender, sender_name=sender, text=text,
                                             file=file)
        await self._submit(message)
        return message

    async def _submit(self, message: WebChatMessage) -> None:
        attachments: tuple[Attachment, ...] = ()
        if message.file is not None:
            f = message.file
            attachments = (Attachment(name=f.name, mime=f.mime, size=f.size, ref=str(f.id),
                                      kind="document"),)
        event = InboundEvent(
            platform=self.platform, workspace=WORKSPACE, channel=message.channel,
            thread_root=message.thread_root, message_id=str(message.id),
            sender=message.sender, sender_name=message.sender_name,
            dedupe_key=f"webchat:{message.id}", text=message.text, mentions_bot=True,
            date=message.created_ms // 1000, attachments=attachments)
        await self.submit([(event, "received")])
        await self._records().mark_submitted(message.id)

    async def click(self, *, channel: str, thread_root: str, message_id: int, sender: str,
                    verb: str, short_id: str) -> None:
        """A click on an approval button: ``/approve ID`` or ``/deny ID`` from ``sender``."""
        click = secrets.token_hex(8)
        event = InboundEvent(
            platform=self.platform, workspace=WORKSPACE, channel=channel,
            thread_root=thread_root, message_id=f"act:{click}", sender=sender,
            sender_name=sender, dedupe_key=f"webchat:act:{click}",
            text=f"/{verb} {short_id}", mentions_bot=True, reply_to=str(message_id),
            reply_to_bot=True, date=int(time.time()),
            extra={"action": "button", "answer": "private", "action_user": sender})
        await self.submit([(event, "received")])

    # -- platform I/O --------------------------------------------------------------------------

    async def send(self, target: ReplyTarget, chunk: Chunk, *, plain: bool = False) -> str:
        text = chunk.fallback if plain else chunk.formatted
        mid = await self._records().send(channel=target.channel,
                                         thread_root=target.thread_root, text=text)
        return str(mid)

    async def edit(
        self, target: ReplyTarget, message_id: str, chunk: Chunk, *, plain: bool = False
    ) -> None:
        text = chunk.fallback if plain else chunk.formatted
        # an edit takes an approval request's buttons away (the decision is in its text)
        done = await self._records().change(_message_id(message_id), text=text,
                                            clear_buttons=True)
        if done == "same":
            raise DeliveryError("not_modified", "the message already says this")
        if done == "missing":
            raise DeliveryError("not_found", f"no web-chat message {message_id}")

    async def delete(self, target: ReplyTarget, message_id: str) -> None:
        """Remove one of the bot's messages from the thread (shown as deleted)."""
        done = await self._records().change(_message_id(message_id), deleted=True)
        if done == "missing":
            raise DeliveryError("not_found", f"no web-chat message {message_id}")

    async def react(self, target: ReplyTarget, message_id: str, emoji: str | None) -> None:
        await self._records().change(_message_id(message_id), reaction=emoji or "")

    def render(self, markdown: str) -> list[Chunk]:
        # the browser shows the Markdown source as text (escaped, never as HTML)
        return split_markdown_source(markdown, limit=self.text_limit, length=len) or [
            Chunk(formatted=markdown or "(empty answer)", fallback=markdown or "(empty answer)")]

    def render_progress(self, text: str) -> Chunk:
        return Chunk(formatted=text, fallback=text)

    # -- approvals with buttons (ApprovalControls) ----------------------------------------------

    async def send_approval(self, target: ReplyTarget, chunk: Chunk, *, short_id: str) -> str:
        mid = await self._records().send(channel=target.channel,
                                         thread_root=target.thread_root, text=chunk.formatted,
                                         short_id=short_id)
        return str(mid)

    async def answer_action(self, event: InboundEvent, text: str) -> None:
        """The clicker alone sees ``text``, in the thread."""
        await self._records().send(channel=event.channel, thread_root=event.thread_root,
                                   text=text, visible_to=event.sender)

    # -- files (upload, ReadBack, AttachmentReader) ---------------------------------------------

    def upload_limit(self, *, image: bool) -> int:
        return int(self.opts.max_file_mb * 1024 * 1024)

    async def post_file(
        self, target: ReplyTarget, *, filename: str, data: bytes, caption: str | None,
        image: bool,
    ) -> str:
        mime = mimetypes.guess_type(filename)[0] or "application/octet-stream"
        mid = await self._records().send(channel=target.channel,
                                         thread_root=target.thread_root, text=caption or "",
                                         file=(filename, mime, data))
        return str(mid)

    async def find_upload(
        self, target: ReplyTarget, *, filename: str, size: int, since: datetime
    ) -> str | None:
        found = await self._records().find_sent(
            target.channel, target.thread_root, file_name=filename, size=size,
            since_ms=int(since.timestamp() * 1000))
        return None if found is None else str(found)

    async def find_approval(
        self, target: ReplyTarget, *, short_id: str, since: datetime
    ) -> str | None:
        found = await self._records().find_sent(
            target.channel, target.thread_root, short_id=short_id,
            since_ms=int(since.timestamp() * 1000))
        return None if found is None else str(found)

    async def download(self, attachment: Attachment, dest: Path, *, max_bytes: int) -> int:
        try:
            file_id = int(attachment.ref)
        except ValueError:
            raise AttachmentRefused("this file is not in the web chat") from None
        found = await self._records().file(file_id)
        if found is None:
            raise AttachmentRefused("this file is gone")
        _, data = found
        if len(data) > max_bytes:
            raise AttachmentRefused(f"{attachment.name} is larger than this binding takes")
        await asyncio.to_thread(dest.write_bytes, data)
        return len(data)


def build_connector(*, host: TurnHost, settings: Settings, secrets: Secrets,
                    options: WebChatOptions) -> WebChatConnector:
    """The connector of ``[channels.webchat]`` (its spec's builder, ``geode serve``)."""
    return WebChatConnector(host=host, bindings=settings.bindings, options=options)
