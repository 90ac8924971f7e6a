"""Files into a thread, exactly once across crashes, through the outbox.

A file is a ``file`` outbox row keyed by what asked for it (a ``send_file`` call: its turn
and call id; an approval's full diff: the request). The row is written ``ready`` before
anything leaves, marked ``sending`` just before the upload and ``sent`` with the platform's
id right after it. Whoever asks again with the same key (the resumed turn re-running the
call, a restarted approval) gets what the row says:

- ``sent``: the id, no upload;
- ``ready``: the upload never started, so it starts now;
- ``sending``: a crash hid the outcome. The thread is read back
  (:meth:`PlatformClient.find_upload`): the file found there is recorded as sent; none
  found means the upload never took effect, and it runs now. Where the platform cannot
  read back what the bot posted (Telegram's Bot API), the row becomes ``uncertain`` and
  the file is **not** sent again (at most once, like a notice).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import structlog

from bots.events import ReplyTarget
from bots.port import DeliveryError, PlatformClient, ReadBack
from bots.store.outbox import Outbox, OutboxRow, OutgoingFile

__all__ = ["FileSender", "UploadOutcome", "image_type"]

log = structlog.get_logger(__name__)

#: magic bytes -> media type of the images platforms show as photos
_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_type(data: bytes) -> str | None:
    """The image type of ``data`` by its content (PNG, JPEG, GIF, WebP), whatever its name."""
    for magic, media_type in _IMAGE_MAGIC:
        if data.startswith(magic):
            return media_type
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(frozen=True, kw_only=True)
class UploadOutcome:
    """What became of one file: ``sent`` (``reconciled``: by an earlier ask, or found in
    the thread), ``uncertain`` (whether it was posted is unknown; it is not sent again) or
    ``failed`` (``error`` says why)."""

    status: Literal["sent", "uncertain", "failed"]
    file: OutgoingFile
    platform_id: str | None = None
    error: str = ""
    reconciled: bool = False


class FileSender:
    """Sends files into threads through ``file`` outbox rows (see the module docstring)."""

    def __init__(self, *, client: PlatformClient, outbox: Outbox) -> None:
        self.client = client
        self.outbox = outbox

    async def send(
        self, *, session_key: str, turn_key: str, target: ReplyTarget, filename: str,
        data: bytes, caption: str = "", image: bool = False,
    ) -> UploadOutcome:
        """Post ``data`` as ``filename`` into the thread, once per (session_key, turn_key)."""
        described = OutgoingFile(name=filename, size=len(data),
                                  sha256=hashlib.sha256(data).hexdigest(), image=image)
        c = self.client
        row = await self.outbox.add_file(
            session_key=session_key, turn_key=turn_key, platform=c.platform,
            workspace=c.workspace, target=target, file=described, caption=caption)
        if row is None:  # asked before (a resumed turn, a restarted request)
            row = await self.outbox.get(session_key, turn_key)
            assert row is not None
            done = await self._reconcile(row)
            if done is not None:
                return done
        return await self._upload(row, data)

    async def _reconcile(self, row: OutboxRow) -> UploadOutcome | None:
        """The outcome a row already has, or None when the upload is (still) to be made."""
        file = row.file
        assert file is not None
        if row.status == "sent":
            return UploadOutcome(status="sent", file=file,
                                 platform_id=row.message_ids[0] if row.message_ids else None,
                                 reconciled=True)
        if row.status == "uncertain":
            return UploadOutcome(status="uncertain", file=file, error=row.error)
        if row.status == "failed":
            return UploadOutcome(status="failed", file=file, error=row.error)
        if row.status == "ready":
            return None  # recorded, never started
        # "sending": did it reach the thread before the crash?
        since = row.created_at or datetime.now(UTC)
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        try:
            if not isinstance(self.client, ReadBack):
                raise DeliveryError("unknown", f"{self.client.platform} cannot read back "
                                    "what the bot posted")
            found = await self.client.find_upload(row.target, filename=file.name,
                                                  size=file.size, since=since)
        except DeliveryError as exc:
            log.warning("upload.outcome_unknown", row=row.id, error=str(exc))
            await self.outbox.finish(row, status="uncertain", error=str(exc))
            return UploadOutcome(status="uncertain", file=file, error=str(exc))
        if found is None:
            log.info("upload.not_in_thread_upload_again", row=row.id)
            return None
        log.info("upload.found_in_thread", row=row.id)
        await self.outbox.record_sent(row, [found])
        return UploadOutcome(status="sent", file=file, platform_id=found, reconciled=True)

    async def _upload(self, row: OutboxRow, data: bytes) -> UploadOutcome:
        file = row.file
        assert file is not None
        caption = row.chunks[0].fallback if row.chunks else ""
        await self.outbox.update(row.id, status="sending")
        try:
            platform_id = await self.client.upload(row.target, filename=file.name, data=data,
                                                   caption=caption or None, image=file.image)
        except DeliveryError as exc:
            # "unknown": it may have been posted: uncertain, never sent again blindly
            status: Literal["uncertain", "failed"] = (
                "uncertain" if exc.kind == "unknown" else "failed")
            await self.outbox.finish(row, status=status, error=str(exc))
            return UploadOutcome(status=status, file=file, error=str(exc))
        await self.outbox.record_sent(row, [platform_id])
        return UploadOutcome(status="sent", file=file, platform_id=platform_id)
