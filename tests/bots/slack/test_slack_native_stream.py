"""Slack's own chat streaming (chat.startStream / appendStream / stopStream through slack_sdk,
against FakeSlack): the draft streams into a message that takes the progress message's place,
the final answer replaces it once; a draft the verifier refused is replaced; where Slack
refuses streaming the answer grows by paced chat.update edits."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from slack_helpers import ALICE, CH, TEAM, bot_messages, make, mention

from bots.events import ReplyTarget
from bots.testing.slack import FakeSlack
from bots.turn import ProgressReporter
from geode.loop.events import ModelResponded, TextDelta, VerifyFailed
from geode.providers.scripted import ScriptedProvider

ANSWER = "Here is **bold text across pieces** and `code`.\n\n```\nx = 1\n```\n\nDone."
STREAM_CALLS = ("chat.startStream", "chat.appendStream", "chat.stopStream")


def _streaming() -> ScriptedProvider:
    return ScriptedProvider([ANSWER], repeat_last=True, stream_piece=8, stream_every_s=0.05)


def _final(fake: FakeSlack, ts: str) -> list[dict[str, Any]]:
    return [m for m in bot_messages(fake, CH, thread=ts)
            if m["text"].endswith("Done.") and not m["text"].startswith("⏳")]


async def test_a_mention_streams_natively_and_the_answer_replaces_the_stream(
        stacks: Any, home: Any, fake: FakeSlack) -> None:
    stack = make(stacks, home, fake, provider=_streaming(), options={
        "stream": True, "progress_after_ms": 0, "progress_edit_interval_s": 0.1})
    connector = await stack.start()
    ts = await fake.user_posts(CH, mention("explain"), user=ALICE)
    await fake.wait_until(lambda: _final(fake, ts), within=15)

    started = fake.calls_to("chat.startStream")
    assert len(started) == 1
    params = started[0].params
    # in the thread, to the person who asked (Slack needs the recipient in channels)
    assert params["thread_ts"] == ts and params["recipient_user_id"] == ALICE
    assert params["recipient_team_id"] == TEAM
    assert str(params["markdown_text"]).startswith("⏳ Working…")
    stream_ts = next(p.ts for p in fake.posts if p.method == "chat.startStream")
    appended = [p.text for p in fake.posts if p.method == "chat.appendStream"]
    assert appended, "the draft grew by appends"
    assert all(b.startswith(a) for a, b in itertools.pairwise(appended))
    # the placeholder the turn posted first gave way to the stream
    placeholder = next(p.ts for p in fake.posts if p.method == "chat.postMessage")
    assert any(p.method == "chat.delete" and p.ts == placeholder for p in fake.posts)
    # the stream was ended, then replaced whole by the rendered answer: one message
    assert [c.params["ts"] for c in fake.calls_to("chat.stopStream")] == [stream_ts]
    shown = bot_messages(fake, CH, thread=ts)
    assert [m["ts"] for m in shown] == [stream_ts]
    assert shown[0]["text"] == connector.render(ANSWER)[0].formatted
    assert not shown[0].get("streaming")


async def test_refused_streaming_falls_back_to_paced_updates(
        stacks: Any, home: Any, fake: FakeSlack) -> None:
    fake.chat_streaming = False  # a workspace whose API has no chat streaming
    stack = make(stacks, home, fake, provider=_streaming(), options={
        "stream": True, "progress_after_ms": 0, "progress_edit_interval_s": 0.1})
    connector = await stack.start()
    first = await fake.user_posts(CH, mention("explain"), user=ALICE)
    await fake.wait_until(lambda: _final(fake, first), within=15)
    second = await fake.user_posts(CH, mention("again"), user=ALICE)
    await fake.wait_until(lambda: _final(fake, second), within=15)

    # tried once: the channel is remembered, the second answer goes straight to edits
    assert [c.error for c in fake.calls_to("chat.startStream")] == ["unknown_method"]
    for ts in (first, second):
        shown = bot_messages(fake, CH, thread=ts)
        assert [m["text"] for m in shown] == [connector.render(ANSWER)[0].formatted]
    drafts = [str(c.params.get("text")) for c in fake.calls_to("chat.update")
              if str(c.params.get("text")).startswith("⏳ Working")]
    assert len(drafts) >= 2  # it grew by edits


async def test_a_not_allowed_answer_falls_back_for_the_channel(
        stacks: Any, home: Any, fake: FakeSlack) -> None:
    fake.fail_next("chat.startStream", status=200, error="not_allowed")
    stack = make(stacks, home, fake, provider=_streaming(), options={
        "stream": True, "progress_after_ms": 0, "progress_edit_interval_s": 0.1})
    connector = await stack.start()
    ts = await fake.user_posts(CH, mention("explain"), user=ALICE)
    await fake.wait_until(lambda: _final(fake, ts), within=15)
    shown = bot_messages(fake, CH, thread=ts)
    assert [m["text"] for m in shown] == [connector.render(ANSWER)[0].formatted]
    assert not [c for c in fake.calls if c.method in STREAM_CALLS[1:]]


async def test_streams_and_appends_stay_within_the_workspace_budgets(
        stacks: Any, home: Any, fake: FakeSlack) -> None:
    stack = make(stacks, home, fake, provider=_streaming(), options={
        "stream": True, "progress_after_ms": 0, "progress_edit_interval_s": 0.1,
        "stream_starts_per_min": 1, "stream_appends_per_min": 6})
    connector = await stack.start()
    first = await fake.user_posts(CH, mention("explain"), user=ALICE)
    await fake.wait_until(lambda: _final(fake, first), within=15)
    second = await fake.user_posts(CH, mention("again"), user=ALICE)
    await fake.wait_until(lambda: _final(fake, second), within=15)

    # one stream a minute: the second answer grew by edits; appends skipped past the budget
    assert [c.params["thread_ts"] for c in fake.calls_to("chat.startStream")] == [first]
    assert len(fake.calls_to("chat.appendStream")) <= 1
    second_drafts = [c for c in fake.calls_to("chat.update")
                     if str(c.params.get("text")).startswith("⏳ Working")
                     and c.params["ts"] != first]
    assert second_drafts
    for ts in (first, second):
        shown = bot_messages(fake, CH, thread=ts)
        assert [m["text"] for m in shown] == [connector.render(ANSWER)[0].formatted]


class _Outbox:
    """The two records the native draft writes, kept in memory."""

    def __init__(self) -> None:
        self.progress: list[str | None] = []

    async def record_progress_message(self, row: Any, message_id: str) -> None:
        self.progress.append(message_id)

    async def update(self, row_id: int, **values: Any) -> None:
        if "progress_message_id" in values:
            self.progress.append(values["progress_message_id"])

    async def recorded(self, row: Any, message_ids: list[str]) -> set[str]:
        return set()


class _Row:
    id = 1
    progress_message_id: str | None = None
    progress_state = "sending"
    message_ids: tuple[str, ...] = ()
    created_at = datetime.now(UTC) - timedelta(seconds=5)


async def test_a_draft_the_verifier_refused_is_replaced_in_the_stream(
        stacks: Any, home: Any, fake: FakeSlack) -> None:
    connector = await make(stacks, home, fake).start()
    root = await fake.user_posts(CH, "question", user=ALICE)
    target = ReplyTarget(channel=CH, thread_root=root, extra={"user": ALICE, "team": TEAM})
    outbox = _Outbox()
    progress = ProgressReporter(
        client=connector, outbox=outbox, row=_Row(),  # type: ignore[arg-type]
        target=target, inbound_message_id=root, edit_interval_s=0.0, stream=True,
        ack_emoji=None)
    await progress.start()
    responded = ModelResponded(turn_id="t", model="m", stop_reason="end_turn",
                               input_tokens=1, output_tokens=1)
    await progress.on_event(TextDelta(text="the wrong answer"))
    await fake.wait_until(lambda: fake.calls_to("chat.startStream"), within=5)
    await progress.on_event(TextDelta(text=", at length"))
    await fake.wait_until(lambda: fake.calls_to("chat.appendStream"), within=5)
    await progress.on_event(responded)
    await progress.on_event(VerifyFailed(turn_id="t", reason="no", attempt=1))
    await progress.on_event(TextDelta(text="the repaired answer"))
    await progress.on_event(responded)

    stream_ts = next(p.ts for p in fake.posts if p.method == "chat.startStream")

    def repaired() -> bool:
        msgs = [m for m in bot_messages(fake, CH, thread=root) if m["ts"] == stream_ts]
        return bool(msgs) and "the repaired answer" in msgs[0]["text"]

    await fake.wait_until(repaired, within=5)
    await progress.close()
    # the stream's id was recorded before anything was appended to it
    assert outbox.progress[-1] == stream_ts == progress.message_id
    shown = bot_messages(fake, CH, thread=root)
    assert [m["ts"] for m in shown] == [stream_ts]  # the placeholder gave way to it
    assert "the wrong answer" not in shown[0]["text"]
    assert not shown[0].get("streaming")  # ended, then edited at the reporter's pace
    assert [c.params["ts"] for c in fake.calls_to("chat.stopStream")] == [stream_ts]


async def test_a_stream_a_crash_left_unrecorded_is_found_and_reused(
        stacks: Any, home: Any, fake: FakeSlack) -> None:
    """The crash fell between chat.startStream and the record of its ts: the row holds the
    intent to send a progress message and no id. The recovered turn finds the stream (it
    starts with the progress line) and reuses it; the update ends it."""
    connector = await make(stacks, home, fake).start()
    root = await fake.user_posts(CH, "question", user=ALICE)
    assert connector.client is not None
    lost = await connector.client.chat_startStream(
        channel=CH, thread_ts=root, markdown_text="⏳ Working…\n\nthe draft so f")
    outbox = _Outbox()
    progress = ProgressReporter(
        client=connector, outbox=outbox, row=_Row(),  # type: ignore[arg-type]
        target=ReplyTarget(channel=CH, thread_root=root), inbound_message_id=root,
        edit_interval_s=0.0, stream=True, ack_emoji=None, recovered=True)
    await progress.start()
    await progress.close()
    assert progress.message_id == lost["ts"] and outbox.progress == [lost["ts"]]
    shown = bot_messages(fake, CH, thread=root)
    assert [m["ts"] for m in shown] == [lost["ts"]]  # reused, no second placeholder
    assert "Resumed" in shown[0]["text"] and not shown[0].get("streaming")


async def test_a_reporter_closing_mid_swap_waits_for_the_stream_to_be_recorded(
        stacks: Any, home: Any, fake: FakeSlack, monkeypatch: Any) -> None:
    """The answer is ready while the stream is being started: the reporter's close waits for
    the swap, so the row names the stream (the answer then replaces it) and never nothing."""
    connector = await make(stacks, home, fake).start()
    root = await fake.user_posts(CH, "question", user=ALICE)
    started, release = asyncio.Event(), asyncio.Event()
    start_stream = connector.start_stream

    async def slow_start(target: ReplyTarget, markdown: str) -> str:
        started.set()
        await release.wait()
        return await start_stream(target, markdown)

    monkeypatch.setattr(connector, "start_stream", slow_start)
    outbox = _Outbox()
    progress = ProgressReporter(
        client=connector, outbox=outbox, row=_Row(),  # type: ignore[arg-type]
        target=ReplyTarget(channel=CH, thread_root=root, extra={"user": ALICE}),
        inbound_message_id=root,
        edit_interval_s=0.0, stream=True, ack_emoji=None)
    await progress.start()
    await progress.on_event(TextDelta(text="the answer"))
    await asyncio.wait_for(started.wait(), 5)
    closing = asyncio.create_task(progress.close())
    await asyncio.sleep(0.1)
    assert not closing.done()  # waits for the swap
    release.set()
    await asyncio.wait_for(closing, 5)
    stream_ts = next(p.ts for p in fake.posts if p.method == "chat.startStream")
    assert outbox.progress[-1] == stream_ts
    assert [m["ts"] for m in bot_messages(fake, CH, thread=root)] == [stream_ts]


async def test_where_streaming_is_refused_a_long_draft_goes_on_in_new_messages(
        stacks: Any, home: Any, fake: FakeSlack) -> None:
    """The fallback is the paced edits every platform has, pages included: a draft past the
    message limit goes on in a new message while it is written, not only at delivery."""
    fake.chat_streaming = False
    long_answer = "\n\n".join(f"Paragraph {i}: " + "words " * 12 for i in range(12))
    provider = ScriptedProvider([long_answer], repeat_last=True, stream_piece=40,
                                stream_every_s=0.05)
    stack = make(stacks, home, fake, provider=provider, options={
        "stream": True, "progress_after_ms": 0, "progress_edit_interval_s": 0.1,
        "chunk_limit": 400})
    connector = await stack.start()
    ts = await fake.user_posts(CH, mention("explain"), user=ALICE)
    final = [c.formatted for c in connector.render(long_answer)]
    await fake.wait_until(
        lambda: [m["text"] for m in bot_messages(fake, CH, thread=ts)] == final, within=20)
    # the placeholder, posted again once Slack refused the stream, then the draft's pages
    # (at delivery they would have been "…" placeholders)
    posted = [p.text for p in fake.posts if p.method == "chat.postMessage"]
    assert len(posted) >= 3 and all(t != "…" for t in posted), posted


async def test_a_stream_goes_only_to_a_known_recipient_outside_direct_messages(
        stacks: Any, home: Any, fake: FakeSlack) -> None:
    """An event stored before the recipient was kept (or a command's) has none: its turn
    streams by edits instead of being refused (which would mark the whole channel)."""
    connector = await make(stacks, home, fake).start()
    root = "1700000000.000100"
    assert not connector.can_stream(ReplyTarget(channel=CH, thread_root=root))
    assert connector.can_stream(ReplyTarget(channel="D0DM", thread_root=root))
    assert connector.can_stream(ReplyTarget(channel=CH, thread_root=root,
                                            extra={"user": ALICE}))
