"""bots.uploads without a platform: what a file row's state makes of a second ask (the
resumed turn's call, a restarted approval), on a real store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from bots.events import ReplyTarget
from bots.port import DeliveryError
from bots.store.outbox import Outbox
from bots.uploads import FileSender, image_type
from geode.store import open_store

TARGET = ReplyTarget(channel="C1", thread_root="100.1")
DATA = b"a,b\n1,2\n"


class Client:
    """The upload side of a PlatformClient with the ReadBack ability, scripted: counts uploads,
    answers lookups."""

    platform = "fake"
    workspace = "W"

    def __init__(self) -> None:
        self.uploads: list[tuple[str, bytes, bool]] = []
        self.found: str | DeliveryError | None = None
        self.fail: DeliveryError | None = None

    async def upload(self, target: ReplyTarget, *, filename: str, data: bytes,
                     caption: str | None = None, image: bool = False) -> str:
        if self.fail is not None:
            raise self.fail
        self.uploads.append((filename, data, image))
        return f"M{len(self.uploads)}"

    async def find_upload(self, target: ReplyTarget, *, filename: str, size: int,
                          since: datetime) -> str | None:
        assert since.tzinfo is not None
        if isinstance(self.found, DeliveryError):
            raise self.found
        return self.found

    async def find_approval(self, target: ReplyTarget, *, short_id: str,
                            since: datetime) -> str | None:
        return None  # the rest of the ReadBack ability (bots.port.ReadBack): no approvals here


@pytest.fixture
async def outbox(home: Path) -> AsyncIterator[Outbox]:
    async with await open_store(f"sqlite:///{home / 'geode.db'}") as store:
        yield Outbox(store=store)


def sender(outbox: Outbox, client: Client) -> FileSender:
    return FileSender(client=client, outbox=outbox)  # type: ignore[arg-type]


async def send(s: FileSender, key: str = "k") -> Any:
    return await s.send(session_key="s", turn_key=key, target=TARGET, filename="r.csv",
                        data=DATA, caption="c")


async def _row_left(outbox: Outbox, status: str) -> None:
    """A row as a crash leaves it: recorded, and ``status``."""
    row = await outbox.add_file(session_key="s", turn_key="k", platform="fake", workspace="W",
                                target=TARGET, file=_file(), caption="c")
    assert row is not None
    await outbox.update(row.id, status=status)


def _file() -> Any:
    from bots.store.outbox import OutgoingFile

    return OutgoingFile(name="r.csv", size=len(DATA), sha256="x")


async def test_sent_once_then_a_second_ask_only_reads_the_row(outbox):
    client = Client()
    first = await send(sender(outbox, client))
    again = await send(sender(outbox, client))
    assert (first.status, first.platform_id, first.reconciled) == ("sent", "M1", False)
    assert (again.status, again.platform_id, again.reconciled) == ("sent", "M1", True)
    assert client.uploads == [("r.csv", DATA, False)]
    row = await outbox.get("s", "k")
    assert row is not None and row.kind == "file" and row.status == "sent"
    assert row.file is not None and row.file.size == len(DATA) and row.message_ids == ["M1"]


@pytest.mark.parametrize("status", ["ready", "sending"],
                         ids=["recorded but never started", "interrupted, not in the thread"])
async def test_a_row_left_unsent_is_uploaded_now(outbox, status):
    await _row_left(outbox, status)
    client = Client()
    out = await send(sender(outbox, client))
    assert (out.status, out.platform_id) == ("sent", "M1")
    assert len(client.uploads) == 1


async def test_an_interrupted_upload_found_in_the_thread_is_recorded_not_repeated(outbox):
    await _row_left(outbox, "sending")
    client = Client()
    client.found = "F9"
    out = await send(sender(outbox, client))
    assert (out.status, out.platform_id, out.reconciled) == ("sent", "F9", True)
    assert client.uploads == []


async def test_where_the_thread_cannot_be_read_back_it_is_not_sent_again(outbox):
    await _row_left(outbox, "sending")
    client = Client()
    client.found = DeliveryError("unknown", "cannot read back")
    out = await send(sender(outbox, client))
    assert out.status == "uncertain" and client.uploads == []
    assert (await send(sender(outbox, client))).status == "uncertain"  # and stays so


async def test_a_refused_upload_fails_and_an_unknown_outcome_is_uncertain(outbox):
    client = Client()
    client.fail = DeliveryError("fatal", "not_in_channel")
    assert (await send(sender(outbox, client), "a")).status == "failed"
    client.fail = DeliveryError("unknown", "timeout")
    assert (await send(sender(outbox, client), "b")).status == "uncertain"


def test_images_are_recognised_by_content():
    assert image_type(b"\x89PNG\r\n\x1a\n....") == "image/png"
    assert image_type(b"\xff\xd8\xff\xe0....") == "image/jpeg"
    assert image_type(b"GIF89a....") == "image/gif"
    assert image_type(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert image_type(b"region,revenue\n") is None


async def test_a_failure_is_recorded_masked(outbox):
    """The row's error is at rest and shown on the console's overview: a platform error that
    quotes a URL with the bot's token in it is stored masked."""
    from geode.secret_redaction import register_secret

    token = "987654:AAH-outbox-error-0123456789abcd"
    register_secret(token)
    client = Client()
    client.fail = DeliveryError("fatal", f"403 at https://api.example.test/bot{token}/sendDocument")
    assert (await send(sender(outbox, client), "m")).status == "failed"
    row = await outbox.get("s", "m")
    assert row is not None and token not in row.error and "sendDocument" in row.error
