"""A loopback fake of OpenAI's ``/v1/audio/transcriptions`` (multipart upload, JSON
answer) and ``/v1/audio/speech`` (JSON request, audio answer) for the real SDK clients in
:mod:`geode.voice`: set ``base_url`` to :attr:`FakeVoice.base_url`."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import BodyPartReader, web

from geode.testing._fakebase import LoopbackFake

__all__ = ["FAKE_SPEECH", "FakeVoice", "SpeechCall", "TranscriptionCall"]

#: what the fake speaks: the first bytes of an Ogg/Opus file, then the text it was given
FAKE_SPEECH = b"OggS\x00\x02" + b"\x00" * 20 + b"OpusHead"


@dataclass(frozen=True)
class TranscriptionCall:
    """One request as the fake received it."""

    model: str
    filename: str
    data: bytes
    #: the key as sent ("" none)
    key: str


@dataclass(frozen=True)
class SpeechCall:
    """One speech request as the fake received it."""

    model: str
    voice: str
    input: str
    response_format: str
    key: str


class FakeVoice(LoopbackFake):
    """Answers every transcription with :attr:`text` (or :attr:`status`: a failure), and
    every speech request with :data:`FAKE_SPEECH` followed by the text it was asked to speak
    (or :attr:`speech_status`: a failure; :attr:`speech_body`: other bytes)."""

    def __init__(self, *, text: str = "hello from a voice note") -> None:
        super().__init__()
        self.text = text
        #: answer every request with this HTTP status instead (an outage, a quota)
        self.status: int | None = None
        self.requests: list[TranscriptionCall] = []
        #: answer every speech request with this HTTP status instead
        self.speech_status: int | None = None
        #: answer every speech request with these bytes instead (not audio, say)
        self.speech_body: bytes | None = None
        self.speech_requests: list[SpeechCall] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_post("/v1/audio/speech", self._speak)
        await self._serve(app)

    async def _transcribe(self, request: web.Request) -> web.Response:
        fields: dict[str, str] = {}
        filename, data = "", b""
        reader = await request.multipart()
        async for part in reader:
            if not isinstance(part, BodyPartReader) or part.name is None:
                continue
            if part.name == "file":
                filename, data = part.filename or "", bytes(await part.read())
            else:
                fields[part.name] = await part.text()
        auth = request.headers.get("Authorization", "")
        self.requests.append(TranscriptionCall(fields.get("model", ""), filename, data,
                                               auth.removeprefix("Bearer ")))
        self._wake()
        if self.status is not None:
            return web.json_response({"error": {"message": "fake failure"}},
                                     status=self.status)
        return web.json_response({"text": self.text})

    async def _speak(self, request: web.Request) -> web.Response:
        body = await request.json()
        auth = request.headers.get("Authorization", "")
        call = SpeechCall(str(body.get("model", "")), str(body.get("voice", "")),
                          str(body.get("input", "")), str(body.get("response_format", "")),
                          auth.removeprefix("Bearer "))
        self.speech_requests.append(call)
        self._wake()
        if self.speech_status is not None:
            return web.json_response({"error": {"message": "fake failure"}},
                                     status=self.speech_status)
        data = self.speech_body if self.speech_body is not None else (
            FAKE_SPEECH + call.input.encode())
        return web.Response(body=data, content_type="audio/ogg")
