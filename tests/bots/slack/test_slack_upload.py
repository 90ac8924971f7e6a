"""Files out on Slack: ``PlatformClient.upload`` is slack_sdk's ``files_upload_v2`` (upload
URL, the bytes, completion into the channel + thread_ts); the fake shares the file in the
thread as a message of the bot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _harness import CRASH_POINTS, crash_at
from slack_helpers import ALICE, CH, SlackStack, bot_messages, mention, quiescent, slack_binding

from bots.events import ReplyTarget
from bots.port import UploadTooLarge
from bots.slack.connector import UPLOAD_LIMIT
from bots.testing.slack import FakeSlack
from geode.providers.scripted import ScriptedProvider
from tests.bots._files import sending

CSV = b"region,revenue\nnorth,42\n"


@pytest.fixture
async def stack(home: Path, fake: FakeSlack) -> AsyncIterator[SlackStack]:
    s = SlackStack(home=home, fake=fake, provider=ScriptedProvider(["ok"], repeat_last=True),
                   bindings=[slack_binding()])
    yield s
    await s.stop()


async def test_a_file_is_uploaded_into_the_thread_with_its_bytes(stack, fake):
    connector = await stack.start()
    root = await fake.user_posts(CH, "no mention: no turn", user=ALICE)
    target = ReplyTarget(channel=CH, thread_root=root)

    fid = await connector.upload(target, filename="report.csv", data=CSV, caption="Q4")

    [up] = fake.uploads
    assert (up.file_id, up.filename, up.data) == (fid, "report.csv", CSV)
    assert (up.channel, up.thread_ts, up.initial_comment) == (CH, root, "Q4")
    # the three steps of files_upload_v2, in order
    methods = [c.method for c in fake.calls if c.method.startswith("files.")]
    assert methods == ["files.getUploadURLExternal", "files.completeUploadExternal"]
    shared = [m for m in fake.messages_in(CH, thread_ts=root) if m.get("files")]
    assert [f["id"] for m in shared for f in m["files"]] == [fid]


async def test_over_the_limit_nothing_is_sent(stack, fake, monkeypatch):
    connector = await stack.start()
    monkeypatch.setattr("bots.slack.client.UPLOAD_LIMIT", 4)
    assert UPLOAD_LIMIT == 1 << 30  # Slack's real limit; lowered here to keep the test small
    with pytest.raises(UploadTooLarge, match=r"big\.bin is 5 bytes"):
        await connector.upload(ReplyTarget(channel=CH, thread_root="1.0"),
                               filename="big.bin", data=b"12345")
    assert not [c for c in fake.calls if c.method.startswith("files.")]


# -- the send_file tool, exactly once -------------------------------------------------------


def _answers(fake: FakeSlack) -> list[str]:
    return [m["text"] for m in bot_messages(fake, CH) if m["text"].startswith("result:")]


async def test_send_file_uploads_the_workspace_file_into_the_thread(home, fake):
    folder = home / "workspaces" / f"slack-{CH}"
    folder.mkdir(parents=True)
    (folder / "report.csv").write_bytes(CSV)
    stack = SlackStack(home=home, fake=fake,
                       provider=ScriptedProvider([sending("report.csv", "Q4")], repeat_last=True),
                       bindings=[slack_binding(tools=["send_file"])])
    try:
        await stack.start()
        root = await fake.user_posts(CH, mention("the report?"), user=ALICE)
        await fake.wait_until(lambda: _answers(fake), within=10)
        [up] = fake.uploads
        assert (up.filename, up.data, up.thread_ts, up.initial_comment) == ("report.csv", CSV,
                                                                            root, "Q4")
        assert _answers(fake) == ["result: sent report.csv (24 bytes) to the thread as a file"]
    finally:
        await stack.stop()


async def test_killed_between_upload_and_record_it_is_reconciled_from_the_thread(home, fake):
    folder = home / "workspaces" / f"slack-{CH}"
    folder.mkdir(parents=True)
    (folder / "report.csv").write_bytes(CSV)
    stack = SlackStack(home=home, fake=fake,
                       provider=ScriptedProvider([sending("report.csv")], repeat_last=True),
                       bindings=[slack_binding(tools=["send_file"])])
    try:
        await stack.start()
        fake.hold_upload_answers()  # shared in the thread; the completion is never answered
        await fake.user_posts(CH, mention("the report?"), user=ALICE)
        await fake.wait_until(lambda: fake.uploads, within=10)
        await stack.crash()
        fake.release_upload_answers()

        await stack.start()
        await fake.wait_until(lambda: _answers(fake), within=15)
        await quiescent(stack)
    finally:
        await stack.stop()
    assert [u.data for u in fake.uploads] == [CSV]  # found in the thread: not uploaded again
    assert len(fake.calls_to("files.completeUploadExternal")) == 1
    assert _answers(fake) == ["result: sent report.csv (24 bytes) to the thread as a file"]


@pytest.mark.parametrize("point", CRASH_POINTS)
async def test_a_crash_at_any_pipeline_point_uploads_once(home, fake, point):
    folder = home / "workspaces" / f"slack-{CH}"
    folder.mkdir(parents=True)
    (folder / "report.csv").write_bytes(CSV)
    hit, fault = crash_at(point)
    stack = SlackStack(home=home, fake=fake,
                       provider=ScriptedProvider([sending("report.csv")], repeat_last=True),
                       bindings=[slack_binding(tools=["send_file"])], fault=fault)
    try:
        await stack.start()
        await fake.user_posts(CH, mention("the report?"), user=ALICE)
        await asyncio.wait_for(hit.wait(), 10)
        await stack.crash()
        stack.fault = None
        await stack.start()
        await fake.wait_until(lambda: _answers(fake), within=15)
        await quiescent(stack)
    finally:
        await stack.stop()
    assert [u.data for u in fake.uploads] == [CSV]
    assert len(set(_answers(fake))) == 1
