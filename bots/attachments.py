"""Attachments in: the layer (never the model) downloads a message's files into its thread's
folder, within the binding's limits, and tells the model where they are.

* ``max_attachment_mb`` (default 20): a file declared larger is refused without a download;
  a download that grows past it is cut off and discarded (nothing beyond the limit is read).
* ``attachment_types`` (default: any): MIME types (``text/*``) or extensions (``.log``) a
  binding accepts; anything else is refused. A refusal is a short line for the user, put
  before the turn's answer, and a note to the model.
* saved as ``threads/<thread_root>/<message_id>-<n>-<name>`` in the binding's workspace,
  written under a temporary name, fsynced, renamed when complete (and the folder fsynced),
  then recorded durably with the inbound event (``bots.store.AttachmentRecords``: path,
  size, sha256; or refused and why). A recovered turn goes by the record: a saved file is
  not downloaded again (its checksum is checked), a refused one stays refused with the same
  words, and a saved file that has vanished is reported plainly (see :func:`_gone`). A
  file renamed into place before a crash took the record is adopted, not fetched again.
* text-like files (logs, code, CSV, JSON, Markdown; a PDF's text through pypdf) are also
  given inline up to ``INLINE_CHARS``, with a note when cut;
* images (PNG, JPEG, GIF, WebP up to ``IMAGE_MAX_BYTES``) also go to the model as image
  content, when its catalog entry says it has vision (decided by the harness).
* voice notes and audio files (``[voice]`` configured: a :class:`~geode.voice.Transcriber`
  given) are checked against the voice limits on what the platform declares (size,
  duration, an audio type) before any download, saved like any file, then transcribed; the
  transcript goes to the model marked as one, and to the user before the answer ("🎙 …")
  so a misheard word can be corrected. It is kept in the attachment's record
  (:meth:`~bots.store.AttachmentRecords.set_transcript`), never in a file: the thread's
  folder is writable by the model's tools, so a file there could be planted or overwritten
  to put words in the user's mouth on a recovered turn. A recovered turn takes it from the
  record instead of sending the audio again (a record without one, e.g. written before
  records kept transcripts, is transcribed again). Bytes that are not audio are never sent;
  an endpoint failure is a notice, and the turn goes on without the transcript.
* a saved file is read back only as the layer wrote it: opened without following a symlink,
  a regular file with one link whose inode is none of GEODE's own (``protected``: its home,
  store, ...). A hard link to ``$GEODE_HOME/.env`` planted under an attachment's name is
  refused, not adopted or given inline (issue #30, finding 7).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fnmatch
import hashlib
import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol, runtime_checkable

import structlog

from bots.events import Attachment, InboundEvent
from bots.port import AttachmentReader, AttachmentRefused, DeliveryError, PlatformClient
from bots.store import AttachmentRecord, AttachmentRecords
from geode.messages import ImageBlock
from geode.settings import BindingSettings
from geode.tools.builtin import own_inodes
from geode.voice import Transcriber, TranscriptionError

__all__ = ["INLINE_CHARS", "Received", "VoiceHost", "is_voice_note", "receive_attachments",
           "recorded_notices"]

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


@runtime_checkable
class VoiceHost(Protocol):
    """A host that transcribes voice notes (``geode serve`` with ``[voice]``): an optional
    capability, checked once by the prepare phase."""

    @property
    def transcriber(self) -> Transcriber | None: ...


def is_voice_note(a: Attachment) -> bool:
    """Whether ``a`` is transcribed as a voice note: by what the connector says it is
    (Telegram's voice notes and audio files, Slack's audio clips and audio files, Discord's
    voice messages and audio files, each with what it declares of its length), not by
    its MIME type."""
    return a.kind in ("voice", "audio")


def _voice_refusal(a: Attachment, voice: Transcriber) -> str | None:
    """Why a voice note is not downloaded, from what the platform declares, or None."""
    mime = a.mime.lower().split(";")[0].strip()
    if mime and not mime.startswith("audio/") and mime != "application/ogg":
        return f"it is not an audio file ({mime})"
    if a.size > voice.max_bytes:
        return (f"it is larger than the voice-note limit "
                f"({voice.max_bytes / (1024 * 1024):g} MB)")
    if a.duration > voice.max_duration_s:
        return f"it is longer than the voice-note limit ({voice.max_duration_s} s)"
    return None


def _image_type(a: Attachment) -> str | None:
    return _IMAGE_MIMES.get(a.mime.lower().split(";")[0].strip()) or _IMAGE_EXTS.get(_suffix(a))


Own = frozenset[tuple[int, int]]
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _NotSaved(AttachmentRefused):
    """The file under an attachment's name is not one the layer saved."""


def _open_saved(path: Path, own: Own) -> BinaryIO:
    """``path`` opened for reading, checked on the fd: a regular file with a single link
    that is none of GEODE's own (a hard link, or a swap to one, is refused)."""
    with contextlib.suppress(OSError):  # absent: the open below says so
        pre = os.stat(path, follow_symlinks=False)
        # looked up before opening: closing a descriptor of the SQLite store would drop
        # serve's locks on it (issue #30), so GEODE's own files are never opened here
        if (pre.st_dev, pre.st_ino) in own:
            raise _NotSaved("the file saved for it was replaced by something else")
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise _NotSaved("the file saved for it was replaced by something else") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or (st.st_dev, st.st_ino) in own:
            raise _NotSaved("the file saved for it was replaced by something else")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _image(path: Path, media_type: str, own: Own) -> ImageBlock:
    with _open_saved(path, own) as f:
        data = f.read(IMAGE_MAX_BYTES + 1)
    return ImageBlock(media_type=media_type, data=base64.b64encode(data).decode("ascii"))


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


def _read_text(path: Path, a: Attachment, own: Own) -> str | None:
    """A text-like file's text (a PDF's extracted text), or None when it has none."""
    if _is_pdf(a):
        try:
            from pypdf import PdfReader

            with _open_saved(path, own) as f:
                reader = PdfReader(f)
                return "\n".join(page.extract_text() or ""
                                  for page in reader.pages).strip() or None
        except AttachmentRefused:
            raise
        except Exception:  # a broken PDF is still a saved file
            log.info("attachment.pdf_unreadable", exc_info=True)
            return None
    if not _is_text(a):
        return None
    with _open_saved(path, own) as f:
        data = f.read(INLINE_CHARS * 4 + 4)
    return data.decode("utf-8", errors="replace")


def _no_fault(point: str) -> None:
    return None


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path, own: Own) -> str:
    h = hashlib.sha256()
    with _open_saved(path, own) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _commit(part: Path, dest: Path) -> str:
    """Make a complete download durable under its final name; returns its sha256.

    The bytes are fsynced before the rename and the folder after it, so the record written
    next never names a file a power cut could still lose or leave half-written."""
    h = hashlib.sha256()
    with part.open("rb+") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
        os.fsync(f.fileno())
    os.replace(part, dest)
    _fsync_dir(dest.parent)
    return h.hexdigest()


def _matches(path: Path, rec: AttachmentRecord, own: Own) -> bool | None:
    """True: the file is as recorded; False: it is there but changed (or not the file the
    layer saved); None: it is gone."""
    try:
        if path.stat().st_size != rec.size:
            return False
        return _sha256(path, own) == rec.sha256
    except FileNotFoundError:
        return None
    except _NotSaved:
        return False


async def _fetch(client: PlatformClient, a: Attachment, dest: Path, max_bytes: int,
                 own: Own) -> tuple[int, str]:
    """Download into ``dest`` (via a temporary name: a crash leaves no half file there);
    returns the size and the sha256. A file already at ``dest`` was complete when renamed
    there (a crash took its record): it is adopted, not downloaded again."""
    with contextlib.suppress(FileNotFoundError):
        size = (await asyncio.to_thread(os.stat, dest)).st_size
        # adopted only as the layer would have left it (one link, none of GEODE's files)
        return size, await asyncio.to_thread(_sha256, dest, own)
    part = dest.with_name(dest.name + ".part")
    try:
        if not isinstance(client, AttachmentReader):
            raise AttachmentRefused("files from this platform are not read yet")
        size = await client.download(a, part, max_bytes=max_bytes)
        if size > max_bytes:  # a client that could not stop in time: still not kept
            raise AttachmentRefused("it is larger than this channel's limit")
        return size, await asyncio.to_thread(_commit, part, dest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            part.unlink()


def _refusal(label: str, why: str, out: Received) -> None:
    out.notices.append(f"⚠️ I did not read {label}: {why}.")
    out.parts.append(f"[attachment {label} not read: {why}]")


def _gone(label: str, rec: AttachmentRecord, out: Received, *, changed: bool) -> None:
    """A file received earlier (recorded as saved) that is no longer as it was: said plainly.

    Deliberately not fetched again: the platform's reference may no longer be good (Discord
    attachment URLs are signed and expire, Slack's ``url_private`` dies with the file),
    and even where it is (a Telegram ``file_id``), the file was removed or changed in the
    workspace after it was saved, by someone or something with access to it: fetching it
    again behind their back would undo that silently. The user can send it again."""
    what = ("has changed since (its checksum differs from the one recorded)" if changed
            else "is no longer there (removed since)")
    out.parts.append(
        f"[attachment {label} was received earlier and saved as {rec.path} ({rec.size} "
        f"bytes), but that file {what}; it was not downloaded again. Ask the user to send "
        f"it again if it is needed.]")
    out.notices.append(f"⚠️ I no longer have {label} as you sent it: the saved copy {what}. "
                       f"Please send it again if I need it.")


async def recorded_notices(records: AttachmentRecords, event_id: int, *,
                           event: InboundEvent | None = None, workspace: Path | None = None,
                           protected: Sequence[Path] = ()) -> list[str]:
    """The user's lines about an event's attachments, from the records alone (a resumed
    turn: the model has its prompt already; nothing is downloaded, refused or transcribed
    anew): the refusals, and (``event`` given) the transcripts its voice notes' records
    hold. Nothing is read from the workspace (``workspace`` and ``protected`` are kept for
    callers; unused)."""
    out = Received()
    for i, rec in sorted((await records.for_event(event_id)).items()):
        if rec.status == "refused":
            _refusal(rec.name or "file", rec.reason, out)
        elif (event is not None and i < len(event.attachments)
              and is_voice_note(event.attachments[i]) and rec.transcript):
            out.notices.append(f"🎙 {rec.transcript}")
    return out.notices


async def _receive_one(
    client: PlatformClient, event: InboundEvent, i: int, a: Attachment, *,
    binding: BindingSettings, workspace: Path, folder: Path, records: AttachmentRecords,
    event_id: int, session_id: str, fault: Callable[[str], None], own: Own,
    voice: Transcriber | None,
) -> AttachmentRecord | str:
    """Refuse or download attachment ``i`` and record the outcome; returns the record, or
    the reason it could not be downloaded this time (a network failure: not recorded, a
    later run may try again)."""
    max_bytes = int(binding.max_attachment_mb * 1024 * 1024)
    base = AttachmentRecord(event_id=event_id, idx=i, status="refused", session_id=session_id,
                            platform=event.platform, file_ref=a.ref, name=a.name or "file",
                            mime=a.mime)
    # a voice note is checked against the voice limits first: never downloaded past them
    why = _voice_refusal(a, voice) if voice is not None and is_voice_note(a) else None
    if why is None and not _allowed(a, binding.attachment_types):
        why = f"files of type {a.mime or _suffix(a) or 'unknown'} are not accepted here"
    elif why is None and a.size > max_bytes:
        why = f"it is larger than this channel's limit ({binding.max_attachment_mb:g} MB)"
    if why is None:
        dest = folder / _file_name(event, i, a)
        try:
            size, sha = await _fetch(client, a, dest, max_bytes, own)
        except AttachmentRefused as exc:
            why = str(exc)
        except DeliveryError as exc:
            log.warning("attachment.download_failed", error=type(exc).__name__, kind=exc.kind)
            if exc.kind != "fatal":
                return "it could not be downloaded"
            why = "it could not be downloaded"  # the platform refused it: so do we
        except OSError as exc:
            log.warning("attachment.download_failed", error=type(exc).__name__)
            return "it could not be downloaded"
        else:
            fault("attachment_saved")
            return await records.add(replace(
                base, status="saved", path=dest.relative_to(workspace).as_posix(), size=size,
                sha256=sha))
    return await records.add(replace(base, reason=why))


async def receive_attachments(
    client: PlatformClient, event: InboundEvent, *, binding: BindingSettings,
    workspace: Path, folder: Path, records: AttachmentRecords, event_id: int,
    session_id: str = "", fault: Callable[[str], None] | None = None,
    protected: Sequence[Path] = (), voice: Transcriber | None = None,
) -> Received:
    """Receive ``event``'s attachments (``event_id``: its inbound row) into ``folder``
    (inside ``workspace``) per the binding's limits, or take them from ``records`` when a
    previous run received them; see the module docstring. ``protected``: GEODE's own
    files (its home, ...), never read back under an attachment's name. ``voice``: the
    transcriber of voice notes (None: they are saved as files, unread)."""
    out = Received()
    if not event.attachments:
        return out
    fault = fault or _no_fault
    own = await asyncio.to_thread(own_inodes, protected, workspace)
    known = await records.for_event(event_id)
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    for i, a in enumerate(event.attachments):
        label = a.name or "file"
        got: AttachmentRecord | str | None = known.get(i)
        fresh = got is None
        if got is None:
            got = await _receive_one(client, event, i, a, binding=binding,
                                     workspace=workspace, folder=folder, records=records,
                                     event_id=event_id, session_id=session_id, fault=fault,
                                     own=own, voice=voice)
        if isinstance(got, str):
            _refusal(label, got, out)
            continue
        if got.status != "saved":
            _refusal(label, got.reason, out)
            continue
        dest = workspace / got.path
        if not fresh:  # received by an earlier run: is it still what was received?
            state = await asyncio.to_thread(_matches, dest, got, own)
            if not state:
                _gone(label, got, out, changed=state is False)
                continue
        try:
            await _describe(a, dest, got, out, own)
            if voice is not None and is_voice_note(a):
                await _transcript(voice, label, dest, got, out, own, records=records)
        except _NotSaved as exc:  # swapped since it was checked: nothing of it is read
            _refusal(label, str(exc), out)
        except FileNotFoundError:
            _gone(label, got, out, changed=False)
    fault("attachments_received")
    return out


async def _describe(a: Attachment, dest: Path, rec: AttachmentRecord, out: Received,
                    own: Own) -> None:
    """A saved file's parts for the model: its path, and its image or text."""
    rel, size = rec.path, rec.size
    head = f"[attachment saved: {rel} ({a.mime or 'unknown type'}, {size} bytes)]"
    media_type = _image_type(a)
    if media_type is not None and size <= IMAGE_MAX_BYTES:
        out.images.append(await asyncio.to_thread(_image, dest, media_type, own))
        out.parts.append(f"{head} (the image itself is attached)")
        return
    text = await asyncio.to_thread(_read_text, dest, a, own)
    if text is None:
        out.parts.append(head)
        return
    cut = len(text) > INLINE_CHARS
    body = text[:INLINE_CHARS]
    note = (f"\n[cut at {INLINE_CHARS} characters; the whole file is {rel}]" if cut else "")
    out.parts.append(f"{head}\n```\n{body}\n```{note}")


def _read_audio(path: Path, limit: int, own: Own) -> bytes:
    with _open_saved(path, own) as f:
        return f.read(limit + 1)


async def _transcript(voice: Transcriber, label: str, dest: Path, rec: AttachmentRecord,
                      out: Received, own: Own, *, records: AttachmentRecords) -> None:
    """A saved voice note's transcript for the model and the user: the one its record holds
    (an earlier run transcribed it), or the endpoint's (then recorded). A failure is said,
    never fatal. Nothing is read from or written to the thread's folder but the audio
    itself: the folder is writable by the model's tools."""
    text = rec.transcript
    if text is None:
        data = await asyncio.to_thread(_read_audio, dest, voice.max_bytes, own)
        try:
            text = await voice.transcribe(data, name=PurePosixPath(rec.path).name)
        except TranscriptionError as exc:
            log.warning("voice.transcription_failed", status=exc.status, error=str(exc))
            out.notices.append(f"⚠️ I could not transcribe {label}: {exc}.")
            out.parts.append(f"[voice note {label} not transcribed: {exc}; it is saved as "
                             f"{rec.path}]")
            return
        # recorded before the turn runs: a recovered turn shows these words, not others
        text = await records.set_transcript(rec.event_id, rec.idx, text)
    out.notices.append(f"🎙 {text}")
    out.parts.append(f"[voice note {label}: an automatic transcript of the user's spoken "
                     f"words follows; it may contain recognition errors]\n{text}")
