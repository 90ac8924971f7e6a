"""bots.attachments and bots._download without a platform: the byte limit while streaming,
and what a restart finds: a recorded file is not downloaded again (a vanished one is reported,
not fetched), a refusal is repeated from its record, a half download is fetched again."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from bots._download import stream_to_file
from bots.attachments import Received, receive_attachments
from bots.events import Attachment, InboundEvent
from bots.port import AttachmentRefused, DeliveryError
from bots.store import AttachmentRecords
from geode.settings import BindingSettings
from geode.store import open_store
from geode.testing.loopback import serve_app


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
    async with serve_app(app) as port:
        with pytest.raises(AttachmentRefused, match="limit"):
            await stream_to_file(f"http://127.0.0.1:{port}/f", tmp_path / "f",
                                 max_bytes=200_000)
        assert (tmp_path / "f").stat().st_size <= 200_000  # nothing past the limit written
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


def _event(mid: str = "7") -> InboundEvent:
    return InboundEvent(platform="telegram", workspace="1", channel="-1", thread_root="7",
                        message_id=mid, sender="42", dedupe_key=f"k{mid}", text="see",
                        attachments=(Attachment(name="a.log", mime="text/plain", size=3,
                                                ref="F1"),))


@pytest.fixture
async def records(tmp_path: Path) -> AsyncIterator[AttachmentRecords]:
    async with await open_store(f"sqlite:///{tmp_path / 'geode.db'}") as store:
        yield AttachmentRecords(store=store)


async def _receive(client: _Client, records: AttachmentRecords, ws: Path, *, event_id: int,
                   mid: str = "7") -> Received:
    return await receive_attachments(
        client, _event(mid), binding=BindingSettings(platform="telegram", channel="-1"),  # type: ignore[arg-type]
        workspace=ws, folder=ws / "threads" / "7", records=records, event_id=event_id,
        session_id="s1")


async def test_a_recorded_file_is_not_downloaded_again_and_its_record_holds_the_checksum(
    tmp_path: Path, records: AttachmentRecords
) -> None:
    ws, client = tmp_path / "ws", _Client(b"abc")
    first = await _receive(client, records, ws, event_id=1)
    again = await _receive(client, records, ws, event_id=1)
    assert client.calls == 1
    assert first.parts == again.parts and "abc" in first.parts[0]
    rec = (await records.for_event(1))[0]
    assert (rec.status, rec.path, rec.size, rec.sha256, rec.file_ref, rec.session_id) == (
        "saved", "threads/7/7-0-a.log", 3, hashlib.sha256(b"abc").hexdigest(), "F1", "s1")
    assert not list((ws / "threads" / "7").glob("*.part"))


def _crashed_with(tmp_path: Path, name: str, data: bytes) -> tuple[Path, _Client, Path]:
    """A workspace whose thread 7 folder holds ``name`` as a crash left it (``data``), a
    client serving ``abc`` for it, and the folder."""
    ws, client = tmp_path / "ws", _Client(b"abc")
    folder = ws / "threads" / "7"
    folder.mkdir(parents=True)
    (folder / name).write_bytes(data)
    return ws, client, folder


async def test_a_half_download_left_by_a_crash_is_downloaded_again(
    tmp_path: Path, records: AttachmentRecords
) -> None:
    ws, client, folder = _crashed_with(tmp_path, "7-0-a.log.part", b"a")  # not received
    await _receive(client, records, ws, event_id=1)
    assert client.calls == 1 and (folder / "7-0-a.log").read_bytes() == b"abc"
    assert not (folder / "7-0-a.log.part").exists()


async def test_a_file_renamed_into_place_before_its_record_is_adopted_not_fetched(
    tmp_path: Path, records: AttachmentRecords
) -> None:
    ws, client, _ = _crashed_with(tmp_path, "7-0-a.log", b"xyz")  # renamed, then the crash
    got = await _receive(client, records, ws, event_id=1)
    assert client.calls == 0 and "xyz" in got.parts[0]
    rec = (await records.for_event(1))[0]
    assert (rec.status, rec.sha256) == ("saved", hashlib.sha256(b"xyz").hexdigest())


async def test_a_saved_file_that_vanished_or_changed_is_reported_not_fetched_again(
    tmp_path: Path, records: AttachmentRecords
) -> None:
    ws, client = tmp_path / "ws", _Client(b"abc")
    await _receive(client, records, ws, event_id=1)
    saved = ws / "threads" / "7" / "7-0-a.log"
    saved.write_bytes(b"abd")  # same size, other bytes
    changed = await _receive(client, records, ws, event_id=1)
    assert "checksum differs" in changed.parts[0] and "abd" not in changed.parts[0]
    saved.unlink()
    gone = await _receive(client, records, ws, event_id=1)
    assert client.calls == 1 and not saved.exists()
    assert "no longer there" in gone.parts[0] and "threads/7/7-0-a.log" in gone.parts[0]
    assert gone.notices and "send it again" in gone.notices[0]


async def test_a_refusal_is_recorded_and_repeated_without_asking_the_platform(
    tmp_path: Path, records: AttachmentRecords
) -> None:
    class Refusing(_Client):
        async def download(self, attachment: Attachment, dest: Path, *, max_bytes: int) -> int:
            self.calls += 1
            raise AttachmentRefused("Telegram did not give the file")

    ws, client = tmp_path / "ws", Refusing(b"")
    first = await _receive(client, records, ws, event_id=1)
    again = await _receive(client, records, ws, event_id=1)
    assert client.calls == 1 and first.notices == again.notices
    assert "did not give the file" in first.notices[0]
    rec = (await records.for_event(1))[0]
    assert (rec.status, rec.reason, rec.path, rec.sha256) == (
        "refused", "Telegram did not give the file", "", "")


async def test_a_network_failure_is_not_recorded_a_later_run_tries_again(
    tmp_path: Path, records: AttachmentRecords
) -> None:
    class Flaky(_Client):
        async def download(self, attachment: Attachment, dest: Path, *, max_bytes: int) -> int:
            self.calls += 1
            if self.calls == 1:
                raise DeliveryError("retry", "file download failed")
            dest.write_bytes(self.content)
            return len(self.content)

    ws, client = tmp_path / "ws", Flaky(b"abc")
    first = await _receive(client, records, ws, event_id=1)
    assert "could not be downloaded" in first.notices[0] and await records.for_event(1) == {}
    again = await _receive(client, records, ws, event_id=1)
    assert client.calls == 2 and "abc" in again.parts[0] and not again.notices
