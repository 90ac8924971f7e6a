"""Attachments in: the layer (never the model) downloads a message's files into its thread's
folder, within the binding's limits, and tells the model where they are.

* ``max_attachment_mb`` (default 20): a file declared larger is refused without a download;
  a download that grows past it is cut off and discarded (nothing beyond the limit is read).
* ``attachment_types`` (default: any): MIME types (``text/*``) or extensions (``.log``) a
  binding accepts; anything else is refused. A refusal is a short line for the user, put
  before the turn's answer, and a note to the model.
* saved as ``threads/<thread_root>/<message_id>-<n>-<name>`` in the binding's workspace,
  written under a temporary name and renamed when complete: the file's presence is the
  record that it was received, so a restarted turn never downloads it twice.
* text-like files (logs, code, CSV, JSON, Markdown; a PDF's text through pypdf) are also
  given inline up to ``INLINE_CHARS``, with a note when cut;
* images (PNG, JPEG, GIF, WebP up to ``IMAGE_MAX_BYTES``) also go to the model as image
  content, when its catalog entry says it has vision (decided by the harness).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import structlog

from bots.events import Attachment, InboundEvent
from bots.port import AttachmentRefused, DeliveryError, PlatformClient
from geode.messages import ImageBlock
from geode.settings import BindingSettings

__all__ = ["INLINE_CHARS", "Received", "receive_attachments"]

log = structlog.get_logger(__name__)

#: characters of a text-like file given inline in the prompt (the rest is in the file)
INLINE_CHARS = 20_000

_TEXT_MIMES = ("text/", "application/json", "application/xml", "application/x-yaml",
               "application/yaml", "application/javascript", "application/x-sh",
               "application/toml", "application/x-ndjson", "application/csv")
_TEXT_EXTS = frozenset(
    ".txt .log .md .markdown .csv .tsv .json .jsonl .ndjson .yaml .yml .toml .ini .cfg .conf "
    ".xml .html .htm .py .js .ts .tsx .jsx .go .rs .java .kt .c .h .cc .cpp .hpp .cs .rb .php "
    ".sh .bash .zsh .sql .diff .patch .env.example .rst .tex .css .scss .swift .lua .pl .r"
    .split())
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


#: image content larger than this stays a file (the APIs' per-image limit is about 5 MB)
IMAGE_MAX_BYTES = 5 * 1024 * 1024
_IMAGE_MIMES = {"image/png": "image/png", "image/jpeg": "image/jpeg", "image/jpg": "image/jpeg",
                "image/gif": "image/gif", "image/webp": "image/webp"}
_IMAGE_EXTS = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
               ".gif": "image/gif", ".webp": "image/webp"}


@dataclass(kw_only=True)
class Received:
    """What a message's attachments add: prompt parts and images for the model, notices for
    the user."""

    parts: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    images: list[ImageBlock] = field(default_factory=list)


def _image_type(a: Attachment) -> str | None:
    return _IMAGE_MIMES.get(a.mime.lower().split(";")[0].strip()) or _IMAGE_EXTS.get(_suffix(a))


def _image(path: Path, media_type: str) -> ImageBlock:
    return ImageBlock(media_type=media_type,
                      data=base64.b64encode(path.read_bytes()).decode("ascii"))


def _file_name(event: InboundEvent, index: int, a: Attachment) -> str:
    name = _UNSAFE.sub("_", PurePosixPath(a.name or "file").name).strip("._") or "file"
    return f"{_UNSAFE.sub('_', event.message_id)}-{index}-{name[:120]}"


def _suffix(a: Attachment) -> str:
    return PurePosixPath(a.name.lower()).suffix


def _allowed(a: Attachment, types: list[str] | None) -> bool:
    if types is None:
        return True
    mime, ext = a.mime.lower(), _suffix(a)
    for t in (t.lower().strip() for t in types):
        if t.startswith(".") and ext == t:
            return True
        if "/" in t and mime and fnmatch.fnmatch(mime, t):
            return True
    return False


def _is_pdf(a: Attachment) -> bool:
    return a.mime.lower() == "application/pdf" or _suffix(a) == ".pdf"


def _is_text(a: Attachment) -> bool:
    return a.mime.lower().startswith(_TEXT_MIMES) or _suffix(a) in _TEXT_EXTS


def _read_text(path: Path, a: Attachment) -> str | None:
    """A text-like file's text (a PDF's extracted text), or None when it has none."""
    if _is_pdf(a):
        try:
            from pypdf import PdfReader

            reader = PdfReader(str(path))
            return "\n".join(page.extract_text() or "" for page in reader.pages).strip() or None
        except Exception:  # a broken PDF is still a saved file
            log.info("attachment.pdf_unreadable", exc_info=True)
            return None
    if not _is_text(a):
        return None
    with path.open("rb") as f:
        data = f.read(INLINE_CHARS * 4 + 4)
    return data.decode("utf-8", errors="replace")


async def _fetch(client: PlatformClient, a: Attachment, dest: Path, max_bytes: int) -> int:
    """Download into ``dest`` (via a temporary name: a crash leaves no half file there)."""
    with contextlib.suppress(FileNotFoundError):
        # received before a restart: not downloaded twice
        return (await asyncio.to_thread(os.stat, dest)).st_size
    part = dest.with_name(dest.name + ".part")
    try:
        size = await client.download(a, part, max_bytes=max_bytes)
        if size > max_bytes:  # a client that could not stop in time: still not kept
            raise AttachmentRefused("it is larger than this channel's limit")
        await asyncio.to_thread(os.replace, part, dest)
        return size
    finally:
        with contextlib.suppress(FileNotFoundError):
            part.unlink()


async def receive_attachments(
    client: PlatformClient, event: InboundEvent, *, binding: BindingSettings,
    workspace: Path, folder: Path,
) -> Received:
    """Download ``event``'s attachments into ``folder`` (inside ``workspace``) per the
    binding's limits; see the module docstring."""
    out = Received()
    if not event.attachments:
        return out
    max_bytes = int(binding.max_attachment_mb * 1024 * 1024)
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    for i, a in enumerate(event.attachments):
        label = a.name or "file"
        why: str | None = None
        if not _allowed(a, binding.attachment_types):
            why = f"files of type {a.mime or _suffix(a) or 'unknown'} are not accepted here"
        elif a.size > max_bytes:
            why = f"it is larger than this channel's limit ({binding.max_attachment_mb:g} MB)"
        dest = folder / _file_name(event, i, a)
        size = 0
        if why is None:
            try:
                size = await _fetch(client, a, dest, max_bytes)
            except AttachmentRefused as exc:
                why = str(exc)
            except (DeliveryError, OSError) as exc:
                log.warning("attachment.download_failed", error=type(exc).__name__)
                why = "it could not be downloaded"
        if why is not None:
            out.notices.append(f"⚠️ I did not read {label}: {why}.")
            out.parts.append(f"[attachment {label} not read: {why}]")
            continue
        rel = dest.relative_to(workspace).as_posix()
        head = f"[attachment saved: {rel} ({a.mime or 'unknown type'}, {size} bytes)]"
        media_type = _image_type(a)
        if media_type is not None and size <= IMAGE_MAX_BYTES:
            out.images.append(await asyncio.to_thread(_image, dest, media_type))
            out.parts.append(f"{head} (the image itself is attached)")
            continue
        text = await asyncio.to_thread(_read_text, dest, a)
        if text is None:
            out.parts.append(head)
            continue
        cut = len(text) > INLINE_CHARS
        body = text[:INLINE_CHARS]
        note = (f"\n[cut at {INLINE_CHARS} characters; the whole file is {rel}]" if cut else "")
        out.parts.append(f"{head}\n```\n{body}\n```{note}")
    return out
