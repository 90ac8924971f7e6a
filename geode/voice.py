"""Voice notes to text and answers to speech: OpenAI-compatible ``/audio/transcriptions``
and ``/audio/speech`` clients (``[voice]``).

The chat layer decides what is a voice note, checks its declared size and duration before
any download, saves it like any attachment and reads it back confined
(:mod:`bots.attachments`); this module only checks that the bytes are audio and sends them.
Bytes that are not audio (by their first bytes, whatever the platform called them) are
never sent to the endpoint.

The endpoint's failures become :class:`TranscriptionError` here, in one place: the caller
tells the user and the turn goes on without the transcript.

A spoken reply (a binding's ``voice_replies``, ``[voice] tts_model``) is the answer's text,
cut to ``max_speech_chars`` at a sentence or word end, synthesised as Ogg/Opus by
:class:`Speaker`; its failures are :class:`SpeechError` (the text answer is delivered
either way, see :mod:`bots.voice_reply`).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from geode.errors import RunError

if TYPE_CHECKING:
    from geode.settings import Secrets, VoiceSettings

__all__ = ["KEY_ENV", "Speaker", "SpeechError", "Transcriber", "TranscriptionError",
           "audio_suffix", "is_audio", "speech_text", "voice_speaker", "voice_transcriber"]

#: where the endpoint's key is read from (the environment or ``$GEODE_HOME/.env``)
KEY_ENV = "OPENAI_API_KEY"

#: the longest transcript kept (characters); the rest is cut with a note
MAX_TRANSCRIPT_CHARS = 20_000


class TranscriptionError(RunError):
    """The transcription endpoint did not give a transcript (``status``: its HTTP status,
    None when it was not reached)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class SpeechError(RunError):
    """The speech endpoint did not give audio (``status``: its HTTP status, None when it was
    not reached or its answer was not Ogg audio)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def audio_suffix(head: bytes) -> str | None:
    """The file suffix of the audio container ``head`` (a file's first bytes) starts, or
    None when it is none the transcription APIs take: Ogg/Opus (chat apps' voice notes),
    MP3, AAC (ADTS), WAV, FLAC, MP4/M4A, WebM/Matroska, AMR. The APIs tell the format by the
    upload's name, so the bytes name it, never the platform's label."""
    for magic, suffix in ((b"OggS", ".ogg"), (b"ID3", ".mp3"), (b"fLaC", ".flac"),
                          (b"\x1a\x45\xdf\xa3", ".webm"), (b"#!AMR", ".amr")):
        if head.startswith(magic):
            return suffix
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return ".wav"
    if head[4:8] == b"ftyp":
        return ".m4a"
    # an MPEG audio or ADTS frame header (11 or 12 sync bits)
    if len(head) >= 2 and head[0] == 0xFF and (head[1] & 0xE0) == 0xE0:
        return ".mp3"
    return None


def is_audio(head: bytes) -> bool:
    """Whether ``head`` starts an audio file (see :func:`audio_suffix`)."""
    return audio_suffix(head) is not None


class Transcriber:
    """Sends audio to ``/audio/transcriptions`` with the OpenAI SDK.

    ``max_bytes`` / ``max_duration_s``: the limits the layer checks against what the
    platform declares, before it downloads anything."""

    def __init__(self, *, model: str, base_url: str | None, api_key: str,
                 timeout_s: float, max_bytes: int, max_duration_s: int) -> None:
        self.model = model
        self.max_bytes = max_bytes
        self.max_duration_s = max_duration_s
        import openai  # only when [voice] is configured: a serve without it loads no model SDK

        self._client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url,
                                          timeout=timeout_s, max_retries=1)

    async def transcribe(self, data: bytes, *, name: str) -> str:
        """The text spoken in ``data`` (an audio file called ``name``).

        Raises:
            TranscriptionError: ``data`` is not audio (nothing is sent), or the endpoint
                failed or answered without text.
        """
        suffix = audio_suffix(data[:16])
        if suffix is None:
            raise TranscriptionError("it is not an audio file")
        if len(data) > self.max_bytes:
            raise TranscriptionError("it is larger than the voice-note limit")
        import openai

        try:
            result = await self._client.audio.transcriptions.create(
                model=self.model, file=(PurePosixPath(name).stem + suffix, data),
                response_format="json")
        except openai.APIStatusError as exc:
            raise TranscriptionError(
                f"the transcription service answered HTTP {exc.status_code}",
                status=exc.status_code) from exc
        except openai.APIError as exc:  # connection refused, timeout, a malformed answer
            raise TranscriptionError("the transcription service could not be reached") from exc
        text = (result.text or "").strip()
        if not text:
            raise TranscriptionError("the transcription service returned no text")
        if len(text) > MAX_TRANSCRIPT_CHARS:
            text = text[:MAX_TRANSCRIPT_CHARS] + " […]"
        return text

    async def aclose(self) -> None:
        await self._client.close()


def voice_transcriber(voice: VoiceSettings, secrets: Secrets) -> Transcriber | None:
    """The configured transcriber, or None when ``[voice] model`` is not set (voice notes
    are then saved as files, unread). A missing key is sent as a placeholder: a local
    Whisper server needs none, and OpenAI's answers 401 (the user is told)."""
    if not voice.model:
        return None
    return Transcriber(model=voice.model, base_url=voice.base_url,
                       api_key=secrets.get(KEY_ENV) or "none", timeout_s=voice.timeout_s,
                       max_bytes=int(voice.max_mb * 1024 * 1024),
                       max_duration_s=voice.max_duration_s)


#: the most audio one spoken reply may be (bytes); a longer answer from the endpoint is refused
MAX_SPEECH_BYTES = 20 * 1024 * 1024


def speech_text(text: str, max_chars: int) -> str:
    """What of ``text`` is spoken: all of it up to ``max_chars``; past that, cut at the last
    sentence end (else word end) before the cap, with an ellipsis (the whole text is beside
    the voice note)."""
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    cut = max(head.rfind(". "), head.rfind("! "), head.rfind("? "))
    if cut >= max_chars // 2:
        return head[:cut + 1] + " …"
    space = head.rfind(" ")
    return (head[:space] if space > 0 else head) + " …"


class Speaker:
    """Sends text to ``/audio/speech`` with the OpenAI SDK and returns Ogg/Opus audio (what
    the chat apps play as a voice note)."""

    def __init__(self, *, model: str, voice: str, base_url: str | None, api_key: str,
                 timeout_s: float, max_chars: int) -> None:
        self.model = model
        self.voice = voice
        self.max_chars = max_chars
        import openai  # only when a tts_model is configured

        self._client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url,
                                          timeout=timeout_s, max_retries=1)

    async def speak(self, text: str) -> bytes:
        """``text`` (cut by :func:`speech_text`) spoken, as an Ogg/Opus file.

        Raises:
            SpeechError: nothing to say, the endpoint failed, or it answered with something
                that is not Ogg audio (or is too large).
        """
        said = speech_text(text, self.max_chars)
        if not said:
            raise SpeechError("there is no text to speak")
        import openai

        try:
            result = await self._client.audio.speech.create(
                model=self.model, voice=self.voice, input=said, response_format="opus")
            data = result.content
        except openai.APIStatusError as exc:
            raise SpeechError(f"the speech service answered HTTP {exc.status_code}",
                              status=exc.status_code) from exc
        except openai.APIError as exc:
            raise SpeechError("the speech service could not be reached") from exc
        if audio_suffix(data[:16]) != ".ogg" or len(data) > MAX_SPEECH_BYTES:
            raise SpeechError("the speech service did not return Ogg/Opus audio")
        return data

    async def aclose(self) -> None:
        await self._client.close()


def voice_speaker(voice: VoiceSettings, secrets: Secrets) -> Speaker | None:
    """The configured speaker, or None when ``[voice] tts_model`` is not set (no binding's
    ``voice_replies`` is spoken then). Same endpoint and key as the transcriber."""
    if not voice.tts_model:
        return None
    return Speaker(model=voice.tts_model, voice=voice.voice, base_url=voice.base_url,
                   api_key=secrets.get(KEY_ENV) or "none", timeout_s=voice.timeout_s,
                   max_chars=voice.max_speech_chars)
