"""Files out on Telegram: ``PlatformClient.upload`` is ``sendDocument`` (``sendPhoto`` for
images) with the file's bytes, in the thread (topic, reply) the connector's send uses; over
the Bot API's limits it is refused before anything is sent."""

from __future__ import annotations

import pytest

from bots.events import ReplyTarget
from bots.port import UploadTooLarge
from tests.bots.conftest import CHAT, binding

CSV = b"region,revenue\nnorth,42\n"


async def test_a_document_goes_with_its_bytes_as_a_reply_in_the_topic(make_stack, fake):
    fake.add_chat(CHAT, is_forum=True)
    topic = fake.create_topic(CHAT, "ops")
    stack = make_stack(bindings=[binding()])
    connector = await stack.start()
    upd = fake.user_says(CHAT, "hi", from_user=42, message_thread_id=topic)
    asked = fake.message_id_for(upd)
    target = ReplyTarget(channel=str(CHAT), thread_root=str(asked), reply_to=str(asked),
                         extra={"message_thread_id": topic})

    mid = await connector.upload(target, filename="report.csv", data=CSV, caption="Q4")

    [up] = fake.uploads
    assert (up.method, up.filename, up.data, up.caption) == ("sendDocument", "report.csv",
                                                             CSV, "Q4")
    assert (up.message_thread_id, up.reply_to_message_id) == (topic, asked)
    assert mid == str(up.message_id)
    [msg] = [m for m in fake.messages_in(CHAT, from_bot=True) if m.message_id == up.message_id]
    assert msg.raw["document"]["file_name"] == "report.csv"


async def test_an_image_goes_as_a_photo(make_stack, fake):
    fake.add_chat(CHAT)
    connector = await make_stack().start()
    target = ReplyTarget(channel=str(CHAT), thread_root="1")
    await connector.upload(target, filename="shot.png", data=b"\x89PNG....", image=True)
    assert [(u.method, u.data) for u in fake.uploads] == [("sendPhoto", b"\x89PNG....")]


async def test_over_the_limits_nothing_is_sent(make_stack, fake):
    fake.add_chat(CHAT)
    connector = await make_stack().start()
    target = ReplyTarget(channel=str(CHAT), thread_root="1")
    photo = b"x" * ((10 << 20) + 1)
    with pytest.raises(UploadTooLarge) as exc:
        await connector.upload(target, filename="big.png", data=photo, image=True)
    assert exc.value.kind == "fatal"
    assert "big.png" in str(exc.value) and "10 MB" in str(exc.value)
    assert not fake.calls_to("sendPhoto") and not fake.calls_to("sendDocument")
    # the same bytes are a fine document (limit 50 MB)
    await connector.upload(target, filename="big.png", data=photo)
    assert [u.method for u in fake.uploads] == ["sendDocument"]
