"""The client port's optional abilities: which platform has which, and what the layer does
for a client that lacks one (the fallback beside each ``isinstance`` check)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bots.attachments import _fetch
from bots.events import Attachment, ReplyTarget
from bots.port import ApprovalControls, AttachmentReader, AttachmentRefused, ReadBack
from bots.store.outbox import Outbox, OutgoingFile
from bots.uploads import FileSender
from geode.store import open_store

TARGET = ReplyTarget(channel="C1", thread_root="100.1")
DATA = b"a,b\n1,2\n"


def test_each_platform_declares_its_abilities_by_what_it_implements():
    from bots.discord.connector import DiscordConnector
    from bots.slack.connector import SlackConnector
    from bots.telegram.connector import TelegramConnector

    def abilities(cls: type) -> set[str]:
        return {p.__name__ for p in (ApprovalControls, ReadBack, AttachmentReader)
                if issubclass(cls, p)}

    everything = {"ApprovalControls", "ReadBack", "AttachmentReader"}
    assert abilities(SlackConnector) == everything
    assert abilities(DiscordConnector) == everything
    # the Bot API reads no history: nothing the bot posted can be found again
    assert abilities(TelegramConnector) == {"ApprovalControls", "AttachmentReader"}


class CoreClient:
    """Only the core of a PlatformClient's upload side: no ``find_upload``."""

    platform = "fake"
    workspace = "W"

    def __init__(self) -> None:
        self.uploads: list[str] = []

    async def upload(self, target: ReplyTarget, *, filename: str, data: bytes,
                     caption: str | None = None, image: bool = False) -> str:
        self.uploads.append(filename)
        return f"M{len(self.uploads)}"


@pytest.fixture
async def outbox(home: Path) -> AsyncIterator[Outbox]:
    async with await open_store(f"sqlite:///{home / 'geode.db'}") as store:
        yield Outbox(store=store)


async def test_without_read_back_an_interrupted_upload_is_uncertain_not_sent_again(outbox):
    row = await outbox.add_file(session_key="s", turn_key="k", platform="fake", workspace="W",
                                target=TARGET, file=OutgoingFile(name="r.csv", size=len(DATA),
                                                                 sha256="x"), caption="c")
    assert row is not None
    await outbox.update(row.id, status="sending")  # as a crash mid-upload leaves it
    client = CoreClient()
    sender = FileSender(client=client, outbox=outbox)  # type: ignore[arg-type]
    out = await sender.send(session_key="s", turn_key="k", target=TARGET, filename="r.csv",
                            data=DATA, caption="c")
    assert out.status == "uncertain" and "cannot read back" in (out.error or "")
    assert client.uploads == []


async def test_without_an_attachment_reader_the_file_is_refused_and_nothing_written(tmp_path):
    dest = tmp_path / "a.bin"
    own: Any = frozenset()
    with pytest.raises(AttachmentRefused, match="not read yet"):
        await _fetch(CoreClient(), Attachment(ref="F1", name="a.bin"), dest,  # type: ignore[arg-type]
                     1 << 20, own)
    assert list(tmp_path.iterdir()) == []
