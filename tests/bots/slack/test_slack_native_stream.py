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
from geode.loop.events import (
    ModelResponded,
    TextDelta,
    ToolProposed,
    ToolResulted,
    VerifyFailed,
)
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
    """The records the native draft writes, kept in memory (``log``: the pages recorded,
    in order with the calls a test logs beside them)."""

    def __init__(self, log: list[tuple[str, Any]] | None = None) -> None:
        self.progress: list[str | None] = []
        self.message_ids: list[str] = []
        self.log = log if log is not None else []

    async def record_progress_message(self, row: Any, message_id: str) -> None:
        self.progress.append(message_id)

    async def update(self, row_id: int, **values: Any) -> None:
        if "progress_message_id" in values:
            self.progress.append(values["progress_message_id"])
        if "message_ids" in values:
            self.message_ids = list(values["message_ids"])
            self.log.append(("record", tuple(self.message_ids)))

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


_RESPONDED = ModelResponded(turn_id="t", model="m", stop_reason="end_turn", input_tokens=1,
                            output_tokens=1)


def _reporter(connector: Any, outbox: _Outbox, root: str) -> ProgressReporter:
    return ProgressReporter(
        client=connector, outbox=outbox, row=_Row(),  # type: ignore[arg-type]
        target=ReplyTarget(channel=CH, thread_root=root, extra={"user": ALICE, "team": TEAM}),
        inbound_message_id=root, edit_interval_s=0.0, stream=True, ack_emoji=None)


async def test_tool_rounds_show_as_lines_between_the_streamed_text_blocks(
        stacks: Any, home: Any, fake: FakeSlack) -> None:
    """The native stream carries the tool lines as the paced draft does, between the text
    blocks, each once its outcome is known (a stream cannot change what it showed)."""
    connector = await make(stacks, home, fake).start()
    root = await fake.user_posts(CH, "question", user=ALICE)
    progress = _reporter(connector, _Outbox(), root)
    await progress.start()

    def streamed() -> str:
        msgs = [m for m in bot_messages(fake, CH, thread=root) if m.get("streaming")]
        return str(msgs[0]["text"]) if msgs else ""

    await progress.on_event(TextDelta(text="Let me look at the file."))
    await fake.wait_until(lambda: "Let me look" in streamed(), within=5)
    await progress.on_event(ToolProposed(id="c1", name="read_file"))
    await progress.on_event(ToolProposed(id="c2", name="run_bash"))
    await asyncio.sleep(0.2)
    assert "read_file" not in streamed()  # running: its line goes out with its outcome
    await progress.on_event(ToolResulted(id="c1", name="read_file", status="ok"))
    await progress.on_event(ToolResulted(id="c2", name="run_bash",
                                         status="denied"))
    await progress.on_event(_RESPONDED)
    await progress.on_event(TextDelta(text="It says **hello**."))
    await fake.wait_until(lambda: "hello" in streamed(), within=5)
    text = streamed()
    await progress.close()

    assert text == ("⏳ Working…\n\nLet me look at the file.\n\n`🔧 read_file ✓`\n\n"
                    "`🔧 run_bash ⛔ denied`\n\nIt says **hello**.")
    # one stream, grown by appends only
    assert len(fake.calls_to("chat.startStream")) == 1
    appended = [p.text for p in fake.posts if p.method == "chat.appendStream"]
    assert all(b.startswith(a) for a, b in itertools.pairwise(appended))


_LONG = "\n\n".join(f"Paragraph {i}: " + "words " * 12 for i in range(12))


async def test_a_long_stream_goes_on_in_a_new_stream_recorded_before_it_grows(
        stacks: Any, home: Any, fake: FakeSlack, monkeypatch: Any) -> None:
    """At the platform's limit the stream is stopped and the draft goes on in a new one,
    whose id is on the turn's outbox row before anything is appended to it."""
    connector = await make(stacks, home, fake, options={"chunk_limit": 400,
                                                        "stream_appends_per_min": 0}).start()
    root = await fake.user_posts(CH, "question", user=ALICE)
    calls: list[tuple[str, Any]] = []
    start, append, stop = (connector.start_stream, connector.append_stream,
                           connector.stop_stream)

    async def logged_start(target: ReplyTarget, markdown: str) -> str:
        ts = await start(target, markdown)
        calls.append(("start", ts))
        return ts

    async def logged_append(target: ReplyTarget, message_id: str, markdown: str) -> None:
        calls.append(("append", message_id))
        await append(target, message_id, markdown)

    async def logged_stop(target: ReplyTarget, message_id: str) -> None:
        calls.append(("stop", message_id))
        await stop(target, message_id)

    monkeypatch.setattr(connector, "start_stream", logged_start)
    monkeypatch.setattr(connector, "append_stream", logged_append)
    monkeypatch.setattr(connector, "stop_stream", logged_stop)
    outbox = _Outbox(calls)
    progress = _reporter(connector, outbox, root)
    await progress.start()
    for i in range(0, len(_LONG), 40):
        await progress.on_event(TextDelta(text=_LONG[i:i + 40]))
        await asyncio.sleep(0.01)
    await progress.on_event(_RESPONDED)
    await fake.wait_until(lambda: any(
        "Paragraph 11" in m["text"] for m in bot_messages(fake, CH, thread=root)), within=10)
    await progress.close()

    started = [ts for kind, ts in calls if kind == "start"]
    assert len(started) >= 3, calls
    assert outbox.message_ids == started  # every page on the row, the progress message first
    assert outbox.progress[-1] == started[0] == progress.message_id
    for prev, page in itertools.pairwise(started):
        # the page before was stopped first; the new one recorded before it grew
        assert calls.index(("stop", prev)) < calls.index(("start", page))
        recorded = next(i for i, c in enumerate(calls)
                        if c[0] == "record" and page in c[1])
        appends = [i for i, c in enumerate(calls) if c == ("append", page)]
        assert all(recorded < i for i in appends), calls
    pages = [m for m in bot_messages(fake, CH, thread=root) if m["ts"] in started]
    assert [m["ts"] for m in pages] == started
    # each page within the platform's limit, the draft in order across them, nothing lost
    shown = " ".join(str(m["text"]) for m in pages).replace("⏳ Working…", "", 1)
    assert all(len(connector.render(str(m["text"]))) == 1 for m in pages)
    assert shown.split() == _LONG.split()  # cut between words, never inside one
    assert [m.get("streaming") for m in pages][:-1] == [False] * (len(pages) - 1)


async def test_a_stream_page_cut_inside_a_code_block_closes_and_reopens_it(
        stacks: Any, home: Any, fake: FakeSlack) -> None:
    connector = await make(stacks, home, fake, options={"chunk_limit": 300,
                                                        "stream_appends_per_min": 0}).start()
    root = await fake.user_posts(CH, "question", user=ALICE)
    code = "\n".join(f"line_{i} = {i}" for i in range(40))
    answer = f"Here:\n\n```python\n{code}\n```\n\nDone."
    progress = _reporter(connector, _Outbox(), root)
    await progress.start()
    await progress.on_event(TextDelta(text=answer))
    await fake.wait_until(lambda: any(
        "Done." in m["text"] for m in bot_messages(fake, CH, thread=root)), within=10)
    await progress.close()
    pages = [str(m["text"]) for m in bot_messages(fake, CH, thread=root)]
    assert len(pages) >= 2
    for page in pages:  # every page is whole markup: its code block closed
        assert page.count("```") % 2 == 0, page
    assert pages[1].startswith("```python\n")


async def test_a_refused_draft_after_a_spill_is_replaced_on_every_page(
        stacks: Any, home: Any, fake: FakeSlack) -> None:
    """The verifier refused a draft that had filled two streams: both are ended and edited,
    the repair in the first, the second ``…`` until the answer fills or retires it; the
    refused text is left on no page."""
    connector = await make(stacks, home, fake, options={"chunk_limit": 400,
                                                        "stream_appends_per_min": 0}).start()
    root = await fake.user_posts(CH, "question", user=ALICE)
    outbox = _Outbox()
    progress = _reporter(connector, outbox, root)
    await progress.start()
    await progress.on_event(TextDelta(text=_LONG))
    await fake.wait_until(lambda: len(fake.calls_to("chat.startStream")) >= 2, within=10)
    await progress.on_event(_RESPONDED)
    await progress.on_event(VerifyFailed(turn_id="t", reason="no", attempt=1))
    await progress.on_event(TextDelta(text="The repaired answer."))
    await progress.on_event(_RESPONDED)

    def repaired() -> bool:
        msgs = bot_messages(fake, CH, thread=root)
        return bool(msgs) and "The repaired answer." in msgs[0]["text"] and all(
            not m.get("streaming") and "Paragraph" not in m["text"] for m in msgs)

    await fake.wait_until(repaired, within=10)
    await progress.close()
    msgs = bot_messages(fake, CH, thread=root)
    assert [m["ts"] for m in msgs] == outbox.message_ids  # no page beside the recorded ones
    assert [m["text"] for m in msgs[1:]] == ["…"] * (len(msgs) - 1)


async def test_a_recovered_turn_edits_its_crashed_runs_stream_pages(
        stacks: Any, home: Any, fake: FakeSlack) -> None:
    """A crashed run left two recorded stream pages (open at Slack): the recovered turn's
    draft edits them (this process cannot append to those streams), starting no stream."""
    connector = await make(stacks, home, fake).start()
    root = await fake.user_posts(CH, "question", user=ALICE)
    assert connector.client is not None
    first = await connector.client.chat_startStream(
        channel=CH, thread_ts=root, markdown_text="⏳ Working…\n\nthe first page")
    second = await connector.client.chat_startStream(
        channel=CH, thread_ts=root, markdown_text="the second p")
    row = _Row()
    row.progress_message_id = first["ts"]
    row.progress_state = "sent"
    row.message_ids = (first["ts"], second["ts"])
    progress = ProgressReporter(
        client=connector, outbox=_Outbox(), row=row,  # type: ignore[arg-type]
        target=ReplyTarget(channel=CH, thread_root=root, extra={"user": ALICE}),
        inbound_message_id=root, edit_interval_s=0.0, stream=True, ack_emoji=None,
        recovered=True)
    await progress.start()
    await progress.on_event(TextDelta(text="a new draft"))

    def edited() -> bool:
        msgs = bot_messages(fake, CH, thread=root)
        return "a new draft" in msgs[0]["text"] and msgs[1]["text"] == "…"

    await fake.wait_until(edited, within=5)
    await progress.close()
    assert len(fake.calls_to("chat.startStream")) == 2  # the crashed run's two, no more
    assert not any(m.get("streaming") for m in bot_messages(fake, CH, thread=root))


async def test_a_long_answer_streams_over_several_messages_each_ending_with_its_part(
        stacks: Any, home: Any, fake: FakeSlack) -> None:
    """A mention whose answer outgrows a Slack message: the stream goes on in new streams
    while it is written, and the delivery edits each into its part of the final answer."""
    long_answer = "\n\n".join(f"Paragraph {i}: " + "words " * 12 for i in range(12))
    provider = ScriptedProvider([long_answer], repeat_last=True, stream_piece=40,
                                stream_every_s=0.05)
    stack = make(stacks, home, fake, provider=provider, options={
        "stream": True, "progress_after_ms": 0, "progress_edit_interval_s": 0.1,
        "chunk_limit": 400, "stream_appends_per_min": 0})
    connector = await stack.start()
    ts = await fake.user_posts(CH, mention("explain"), user=ALICE)
    final = [c.formatted for c in connector.render(long_answer)]
    await fake.wait_until(
        lambda: [m["text"] for m in bot_messages(fake, CH, thread=ts)] == final, within=20)
    started = [p.ts for p in fake.posts if p.method == "chat.startStream"]
    assert len(started) >= 2  # it went on in new streams while it was written
    shown = bot_messages(fake, CH, thread=ts)
    assert [m["ts"] for m in shown][:len(started)] == started
    assert not any(m.get("streaming") for m in shown)
