"""A loopback fake of OpenAI's ``/v1/audio/transcriptions`` (multipart upload, JSON
answer) for the real SDK client in :mod:`geode.voice`: set ``base_url`` to
:attr:`FakeVoice.base_url`."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import BodyPartReader, web

from geode.testing._fakebase import LoopbackFake

__all__ = ["FakeVoice", "TranscriptionCall"]


@dataclass(frozen=True)
class TranscriptionCall:
    """One request as the fake received it."""

    model: str
    filename: str
    data: bytes
    #: the key as sent ("" none)
    key: str


class FakeVoice(LoopbackFake):
    """Answers every transcription with :attr:`text` (or :attr:`status`: a failure)."""

    def __init__(self, *, text: str = "hello from a voice note") -> None:
        super().__init__()
        self.text = text
        #: answer every request with this HTTP status instead (an outage, a quota)
        self.status: int | None = None
        self.requests: list[TranscriptionCall] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
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
