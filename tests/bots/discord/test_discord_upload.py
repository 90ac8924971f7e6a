"""Files out on Discord: ``PlatformClient.upload`` is a message with the file attached
(multipart ``POST /channels/{id}/messages``) in the thread the replies go to; over the
configured limit (10 MiB by default) it is refused before anything is sent."""

from __future__ import annotations

import asyncio

import pytest
from _discord_stack import dbinding, dfake, make_dstack, texts_in  # noqa: F401  (fixtures)
from _harness import CRASH_POINTS, crash_at

from bots.events import ReplyTarget
from bots.port import UploadTooLarge
from geode.providers.scripted import ScriptedProvider
from tests.bots._files import sending
from tests.bots._harness import quiescent

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


# -- the send_file tool, exactly once -------------------------------------------------------


def _answers(fake) -> list[str]:
    return [t for cid in list(fake.channels) for t in texts_in(fake, cid)
            if t.startswith("result:")]


def _report(home, fake) -> None:
    folder = home / "workspaces" / f"discord-{fake.channel_id}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pods.log").write_bytes(LOG)


async def test_send_file_attaches_the_workspace_file_in_the_thread(make_dstack, dfake, home):  # noqa: F811 (fixtures)
    _report(home, dfake)
    stack = make_dstack(provider=ScriptedProvider([sending("pods.log", "the log")],
                                                  repeat_last=True),
                        bindings=[dbinding(dfake, tools=["send_file"])])
    await stack.start()
    mid = await dfake.user_says(dfake.channel_id, "logs?", mention_bot=True)
    await dfake.wait_for(lambda: _answers(dfake), timeout=10)
    [up] = dfake.uploads
    assert (up.channel_id, up.filename, up.data, up.content) == (mid, "pods.log", LOG,
                                                                 "the log")
    assert _answers(dfake) == ["result: sent pods.log (28 bytes) to the thread as a file"]


async def test_killed_between_upload_and_record_it_is_reconciled_from_the_thread(
        make_dstack, dfake, home):  # noqa: F811 (fixtures)
    _report(home, dfake)
    stack = make_dstack(provider=ScriptedProvider([sending("pods.log")], repeat_last=True),
                        bindings=[dbinding(dfake, tools=["send_file"])])
    await stack.start()
    dfake.hold_upload_answers()  # the message with the file exists; its answer never comes
    await dfake.user_says(dfake.channel_id, "logs?", mention_bot=True)
    await dfake.wait_for(lambda: dfake.uploads, timeout=10)
    await stack.crash()
    dfake.release_upload_answers()

    await stack.start()
    await dfake.wait_for(lambda: _answers(dfake), timeout=15)
    assert [u.data for u in dfake.uploads] == [LOG]  # found in the thread: not sent again
    assert _answers(dfake) == ["result: sent pods.log (28 bytes) to the thread as a file"]


@pytest.mark.parametrize("point", CRASH_POINTS)
async def test_a_crash_at_any_pipeline_point_uploads_once(
        make_dstack, dfake, home, point):  # noqa: F811 (fixtures)
    _report(home, dfake)
    hit, fault = crash_at(point)
    stack = make_dstack(provider=ScriptedProvider([sending("pods.log")], repeat_last=True),
                        bindings=[dbinding(dfake, tools=["send_file"])], fault=fault)
    await stack.start()
    await dfake.user_says(dfake.channel_id, "logs?", mention_bot=True)
    await asyncio.wait_for(hit.wait(), 10)
    await stack.crash()
    stack.fault = None
    await stack.start()
    await dfake.wait_for(lambda: _answers(dfake), timeout=15)
    await quiescent(stack)
    assert [u.data for u in dfake.uploads] == [LOG]
    assert len(set(_answers(dfake))) == 1
