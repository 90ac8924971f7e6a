"""Files out on Discord: ``PlatformClient.upload`` is a message with the file attached
(multipart ``POST /channels/{id}/messages``) in the thread the replies go to; over the
configured limit (10 MiB by default) it is refused before anything is sent."""

from __future__ import annotations

import pytest
from _discord_stack import dfake, make_dstack  # noqa: F401  (fixtures)

from bots.events import ReplyTarget
from bots.port import UploadTooLarge

LOG = b"worker-3 OOMKilled at 02:14\n"


async def test_a_file_is_attached_in_the_thread_with_its_bytes(make_dstack, dfake):  # noqa: F811 (fixtures)
    connector = await make_dstack().start()
    thread = await dfake.create_thread(dfake.channel_id, name="ops")
    target = ReplyTarget(channel=str(dfake.channel_id), thread_root=str(thread),
                         extra={"thread_id": str(thread)})

    mid = await connector.upload(target, filename="pods.log", data=LOG, caption="the log")

    [up] = dfake.uploads
    assert (up.channel_id, up.filename, up.data, up.content) == (thread, "pods.log", LOG,
                                                                 "the log")
    assert mid == str(up.message_id)
    [msg] = [m for m in dfake.messages_in(thread) if m["id"] == mid]
    assert [a["filename"] for a in msg["attachments"]] == ["pods.log"]


async def test_over_the_configured_limit_nothing_is_sent(make_dstack, dfake):  # noqa: F811 (fixtures)
    connector = await make_dstack(options={"max_upload_mb": 0.001}).start()
    target = ReplyTarget(channel=str(dfake.channel_id), thread_root="1")
    with pytest.raises(UploadTooLarge) as exc:
        await connector.upload(target, filename="dump.bin", data=b"y" * 2000)
    assert "dump.bin" in str(exc.value) and "1.02 KB" in str(exc.value)
    assert dfake.uploads == [] and not dfake.sent


async def test_the_default_limit_is_10_mib(make_dstack, dfake):  # noqa: F811 (fixtures)
    connector = await make_dstack().start()
    assert connector.upload_limit(image=False) == 10 << 20
