"""Spoken replies: an answer to a voice note is also sent as a voice note, with the text
beside it (a binding's ``voice_replies = true``, ``[voice] tts_model``).

The text answer is delivered first and whole, exactly as without this; only then is the
model's answer (as the checkpoint holds it, redacted as the text was, without the notices put
before it, cut by :func:`geode.voice.speech_text`) synthesised and
uploaded as a ``file`` outbox row keyed ``voice:<turn key>`` (:class:`bots.uploads.
FileSender`): a turn delivered again after a restart finds the row and does not speak or
upload twice (``sent``: done; ``sending`` when the process stopped: read back from the
thread where the platform can, else not sent again). A synthesis or upload failure is
logged; the text answer has landed once either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import structlog

from bots.attachments import is_voice_note
from geode.secret_redaction import redact_text
from geode.settings import BindingSettings
from geode.voice import Speaker, SpeechError

if TYPE_CHECKING:
    from bots.store import StoredEvent
    from bots.store.outbox import Outbox, OutboxRow
    from bots.uploads import FileSender, UploadOutcome

__all__ = [
    "VOICE_FILENAME",
    "SpeakerHost",
    "send_voice_reply",
    "voice_reply_key",
    "wants_voice_reply",
]

log = structlog.get_logger(__name__)

#: the name a spoken reply is uploaded under (Ogg/Opus: Telegram posts it as a voice note)
VOICE_FILENAME = "answer.ogg"


@runtime_checkable
class SpeakerHost(Protocol):
    """A host that speaks answers (``geode serve`` with ``[voice] tts_model``): an optional
    capability, checked once by the deliver phase."""

    @property
    def speaker(self) -> Speaker | None: ...


def wants_voice_reply(binding: BindingSettings | None, stored: StoredEvent) -> bool:
    """Whether the answer to ``stored``'s event is spoken too: its binding says so and it came
    with a voice note (or audio file) as the connector declared it."""
    return bool(isinstance(binding, BindingSettings) and binding.voice_replies
                and any(is_voice_note(a) for a in stored.event.attachments))


def voice_reply_key(row: OutboxRow) -> str:
    """The outbox key of the spoken reply to ``row``'s turn (one per turn)."""
    return f"voice:{row.turn_key}"


async def send_voice_reply(*, speaker: Speaker, files: FileSender, outbox: Outbox,
                           row: OutboxRow, answer: str) -> UploadOutcome | None:
    """Speak ``answer`` (the model's answer of ``row``'s delivered turn) and upload it into
    its thread, once; None when nothing was sent now (spoken before, or the synthesis
    failed)."""
    key = voice_reply_key(row)
    before = await outbox.get(row.session_key, key)
    if before is not None and before.status in ("sent", "uncertain", "failed"):
        return None  # decided by an earlier delivery: never spoken or sent twice
    text = redact_text(answer)
    try:
        audio = await speaker.speak(text)
    except SpeechError as exc:
        log.warning("voice_reply.speech_failed", row=row.id, status=exc.status, error=str(exc))
        return None
    outcome = await files.send(session_key=row.session_key, turn_key=key, target=row.target,
                               filename=VOICE_FILENAME, data=audio)
    if outcome.status != "sent":
        log.warning("voice_reply.not_sent", row=row.id, status=outcome.status,
                    error=outcome.error)
    return outcome
