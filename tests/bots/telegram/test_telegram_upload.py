"""Files out on Telegram: ``PlatformClient.upload`` is ``sendDocument`` (``sendPhoto`` for
images) with the file's bytes, in the thread (topic, reply) the connector's send uses; over
the Bot API's limits it is refused before anything is sent."""

from __future__ import annotations

import asyncio

import pytest
from _harness import CRASH_POINTS, crash_at

from bots.events import ReplyTarget
from bots.port import UploadTooLarge
from geode.providers.scripted import ScriptedProvider
from tests.bots._files import PNG, sending
from tests.bots.conftest import CHAT, binding, settled

CSV = b"region,revenue\nnorth,42\n"


def _answers(fake) -> list[str]:
    return [s.plain_text for s in fake.sent if s.plain_text.startswith("result:")]


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


# -- the send_file tool ---------------------------------------------------------------------


def _workspace(home) -> object:
    folder = home / "workspaces" / f"telegram-{CHAT}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def test_send_file_uploads_the_workspace_file_once_into_the_thread(make_stack, fake,
                                                                          home):
    (_workspace(home) / "report.csv").write_bytes(CSV)
    provider = ScriptedProvider([sending("report.csv", "Q4 numbers")], repeat_last=True)
    await make_stack(provider=provider, bindings=[binding(tools=["send_file"])]).start()
    asked = fake.message_id_for(fake.user_says(CHAT, "@geode_bot the report?", from_user=42))
    await fake.wait_until(lambda: _answers(fake), within=10)
    [up] = fake.uploads
    assert (up.method, up.filename, up.data, up.caption) == ("sendDocument", "report.csv", CSV,
                                                             "Q4 numbers")
    assert up.reply_to_message_id == asked
    [answer] = _answers(fake)
    assert answer == "result: sent report.csv (24 bytes) to the thread as a file"


async def test_an_image_by_content_goes_as_a_photo(make_stack, fake, home):
    (_workspace(home) / "chart.dat").write_bytes(PNG)  # no image extension: sniffed
    provider = ScriptedProvider([sending("chart.dat")], repeat_last=True)
    await make_stack(provider=provider, bindings=[binding(tools=["send_file"])]).start()
    fake.user_says(CHAT, "@geode_bot chart?", from_user=42)
    await fake.wait_until(lambda: fake.uploads, within=10)
    assert [(u.method, u.data) for u in fake.uploads] == [("sendPhoto", PNG)]


async def test_send_file_is_denied_unless_the_binding_allows_it(make_stack, fake, home):
    (_workspace(home) / "report.csv").write_bytes(CSV)
    provider = ScriptedProvider([sending("report.csv")], repeat_last=True)
    await make_stack(provider=provider, bindings=[binding()]).start()  # default tools
    fake.user_says(CHAT, "@geode_bot the report?", from_user=42)
    await fake.wait_until(lambda: _answers(fake), within=10)
    assert fake.uploads == []
    [answer] = _answers(fake)
    assert "send_file" in answer and "sent report.csv" not in answer


async def test_a_path_outside_the_workspace_is_refused(make_stack, fake, home):
    _workspace(home)
    (home / "secret.txt").write_text("s3cret")
    provider = ScriptedProvider([sending("../../secret.txt")], repeat_last=True)
    await make_stack(provider=provider, bindings=[binding(tools=["send_file"])]).start()
    fake.user_says(CHAT, "@geode_bot leak", from_user=42)
    await fake.wait_until(lambda: _answers(fake), within=10)
    assert fake.uploads == []
    [answer] = _answers(fake)
    assert "refused" in answer and "s3cret" not in answer



@pytest.mark.parametrize("plant", ["file_link", "dir_link", "geode_env"])
async def test_send_file_cannot_be_pointed_at_what_the_workspace_does_not_hold(
        make_stack, fake, home, tmp_path, plant):
    """The attacker's routes out through send_file: a symlink planted in the workspace to a
    file outside it, one to a directory outside it, and GEODE's own .env (home files are
    never readable through a tool). Nothing is uploaded and the secret never reaches the
    thread."""
    work = _workspace(home)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s3cret")
    (home / ".env").write_text("TELEGRAM_BOT_TOKEN=s3cret\n")
    path = {"file_link": "leak.txt", "dir_link": "out/secret.txt",
            "geode_env": str(home / ".env")}[plant]
    if plant == "file_link":
        (work / "leak.txt").symlink_to(outside / "secret.txt")
    elif plant == "dir_link":
        (work / "out").symlink_to(outside, target_is_directory=True)
    provider = ScriptedProvider([sending(path)], repeat_last=True)
    await make_stack(provider=provider, bindings=[binding(tools=["send_file"])]).start()
    fake.user_says(CHAT, "@geode_bot leak", from_user=42)
    await fake.wait_until(lambda: _answers(fake), within=10)
    assert fake.uploads == []
    assert not any("s3cret" in s.plain_text for s in fake.sent)
    [answer] = _answers(fake)
    assert "sent " not in answer and "refused" in answer, answer

# -- exactly once across crashes ------------------------------------------------------------


@pytest.mark.parametrize("point", CRASH_POINTS)
async def test_a_crash_at_any_pipeline_point_uploads_once(make_stack, fake, home, point):
    (_workspace(home) / "report.csv").write_bytes(CSV)
    provider = ScriptedProvider([sending("report.csv")], repeat_last=True)
    hit, fault = crash_at(point)
    stack = make_stack(provider=provider, bindings=[binding(tools=["send_file"])], fault=fault)
    await stack.start()
    fake.user_says(CHAT, "@geode_bot the report?", from_user=42)
    await asyncio.wait_for(hit.wait(), 10)
    await stack.crash()

    stack.fault = None
    await stack.start()
    await fake.wait_until(lambda: _answers(fake), within=15)
    await settled(stack)
    assert [u.data for u in fake.uploads] == [CSV]
    assert len(set(_answers(fake))) == 1


async def test_killed_between_upload_and_record_it_is_not_uploaded_again(make_stack, fake,
                                                                          home):
    """The Bot API cannot read the chat back: the row is left uncertain, the file is not
    sent a second time, and the model is told it may be there."""
    (_workspace(home) / "report.csv").write_bytes(CSV)
    provider = ScriptedProvider([sending("report.csv")], repeat_last=True)
    stack = make_stack(provider=provider, bindings=[binding(tools=["send_file"])])
    await stack.start()
    fake.hold_upload_answers()  # the upload takes effect; its answer never arrives
    fake.user_says(CHAT, "@geode_bot the report?", from_user=42)
    await fake.wait_until(lambda: fake.uploads, within=10)
    await stack.crash()
    fake.release_upload_answers()

    await stack.start()
    await fake.wait_until(lambda: _answers(fake), within=15)
    await settled(stack)
    assert [u.data for u in fake.uploads] == [CSV]
    [answer] = set(_answers(fake))
    assert "may or may not be in the thread" in answer


async def test_an_image_too_large_for_a_photo_goes_as_a_document(make_stack, fake, home):
    big = PNG + b"\x00" * (10 << 20)  # a PNG by its content, over the 10 MB photo limit
    (_workspace(home) / "scan.png").write_bytes(big)
    provider = ScriptedProvider([sending("scan.png")], repeat_last=True)
    await make_stack(provider=provider, bindings=[binding(tools=["send_file"])]).start()
    fake.user_says(CHAT, "@geode_bot the scan?", from_user=42)
    await fake.wait_until(lambda: _answers(fake), within=15)
    assert [(u.method, len(u.data)) for u in fake.uploads] == [("sendDocument", len(big))]
    assert _answers(fake) == ["result: sent scan.png (10 MB) to the thread as a file"]
