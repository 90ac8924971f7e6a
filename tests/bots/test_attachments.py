"""bots.attachments and bots._download without a platform: the byte limit while streaming,
and a file received before a restart is not downloaded again."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web

from bots._download import stream_to_file
from bots.attachments import receive_attachments
from bots.events import Attachment, InboundEvent
from bots.port import AttachmentRefused
from geode.settings import BindingSettings


async def test_a_body_growing_past_the_limit_is_cut_off(tmp_path: Path) -> None:
    served: list[int] = []

    async def endless(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()  # chunked: no Content-Length to refuse up front
        await resp.prepare(request)
        try:
            for _ in range(1000):
                await resp.write(b"x" * 65536)
                served.append(1)
        except (ConnectionResetError, RuntimeError):
            pass
        return resp

    app = web.Application()
    app.router.add_get("/f", endless)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        with pytest.raises(AttachmentRefused, match="limit"):
            await stream_to_file(f"http://127.0.0.1:{port}/f", tmp_path / "f",
                                 max_bytes=200_000)
        assert (tmp_path / "f").stat().st_size <= 200_000  # nothing past the limit written
    finally:
        await runner.cleanup()
    assert len(served) < 1000  # the server was cut off, not read to the end


class _Client:
    """Just the download part of a PlatformClient, counting calls."""

    def __init__(self, content: bytes) -> None:
        self.content = content
        self.calls = 0

    async def download(self, attachment: Attachment, dest: Path, *, max_bytes: int) -> int:
        self.calls += 1
        dest.write_bytes(self.content)
        return len(self.content)


def _event() -> InboundEvent:
    return InboundEvent(platform="telegram", workspace="1", channel="-1", thread_root="7",
                        message_id="7", sender="42", dedupe_key="k7", text="see",
                        attachments=(Attachment(name="a.log", mime="text/plain", size=3,
                                                ref="F1"),))


async def test_a_file_received_before_a_restart_is_not_downloaded_again(tmp_path: Path) -> None:
    binding = BindingSettings(platform="telegram", channel="-1")
    client = _Client(b"abc")
    folder = tmp_path / "threads" / "7"
    first = await receive_attachments(client, _event(), binding=binding,  # type: ignore[arg-type]
                                      workspace=tmp_path, folder=folder)
    again = await receive_attachments(client, _event(), binding=binding,  # type: ignore[arg-type]
                                      workspace=tmp_path, folder=folder)
    assert client.calls == 1
    assert first.parts == again.parts and "abc" in first.parts[0]
    # a half download left by a crash (the temporary name) does not count as received
    (folder / next(folder.iterdir()).name).unlink()
    (folder / "7-0-a.log.part").write_bytes(b"a")
    await receive_attachments(client, _event(), binding=binding,  # type: ignore[arg-type]
                              workspace=tmp_path, folder=folder)
    assert client.calls == 2 and (folder / "7-0-a.log").read_bytes() == b"abc"
    assert not (folder / "7-0-a.log.part").exists()
