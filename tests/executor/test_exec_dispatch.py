"""Checks 7-11: receipts before dispatch, resource locks, deadlines, failures, results."""

from __future__ import annotations

import asyncio
from typing import Any

from exec_helpers import HarnessFactory, Recorder, make_tool

from geode.executor import MemoryReceiptStore, ResourceLocks
from geode.hooks import HookEvent, HookRegistry, HookResult
from geode.messages import ImageBlock, TextBlock
from geode.tools.base import ToolContext, ToolDef, ToolOutput
from geode.tools.errors import ToolFailure

# -- receipts ------------------------------------------------------------------------------


async def test_receipt_is_intended_before_the_handler_runs(harness: HarnessFactory) -> None:
    receipts = MemoryReceiptStore()
    seen: list[str] = []

    async def body(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        seen.append(receipts.records[ctx.call_id].status)
        return "written"

    def tools(rec: Recorder) -> list[ToolDef]:
        return [make_tool(rec, "write_file", safety="write", body=body)]

    h = harness("HEADLESS", allow_tools=["write_file"], tools=tools, receipts=receipts)
    res = await h.run_one("write_file", {"path": "a.txt"})
    assert seen == ["intended"]
    rec = receipts.records[res.tool_use_id]
    assert (rec.status, rec.tool, rec.session_id, rec.turn_id) == ("done", "write_file", "s1", "t1")
    assert len(rec.args_hash) == 64


async def test_no_receipt_no_run(harness: HarnessFactory) -> None:
    class Broken(MemoryReceiptStore):
        async def intend(self, **kw: Any) -> None:
            raise OSError("disk full")

    h = harness("HEADLESS", allow_tools=["write_file"], receipts=Broken())
    res = await h.run_one("write_file")
    assert res.is_error and "effect receipt could not be recorded" in res.text_content
    assert h.rec.calls == []


async def test_read_only_tools_get_no_receipt(harness: HarnessFactory) -> None:
    h = harness()
    await h.run_one("read_file")
    assert h.receipts.records == {}


async def test_context_carries_session_identity_and_deps(harness: HarnessFactory) -> None:
    ctxs: list[ToolContext] = []

    async def body(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        ctxs.append(ctx)
        return "ok"

    h = harness("DAEMON", tools=lambda rec: [make_tool(rec, "read_file", body=body)])
    res = await h.run_one("read_file", {"path": "a"})
    (ctx,) = ctxs
    assert (ctx.session_id, ctx.turn_id, ctx.call_id, ctx.mode) == ("s1", "t1", res.tool_use_id,
                                                                      "DAEMON")
    # the session's typed deps reach the tool; the executor adds what read_result reads
    # with (this session's kept results, the page size)
    assert ctx.deps.display == ":7"
    assert ctx.deps.kept_results is not None and ctx.deps.result_max_chars == 50_000


# -- resource locks ------------------------------------------------------------------------


def _tracing_writes(log: list[tuple[str, str]], gates: dict[str, asyncio.Event] | None = None):
    async def body(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        log.append(("enter", args["content"]))
        if gates is not None:
            gates[args["content"]].set()
            other = "b" if args["content"] == "a" else "a"
            await asyncio.wait_for(gates[other].wait(), 5)  # rendezvous: both inside at once
        else:
            for _ in range(20):  # plenty of chances for a concurrent call to enter
                await asyncio.sleep(0)
        log.append(("exit", args["content"]))
        return "ok"

    def tools(rec: Recorder) -> list[ToolDef]:
        return [make_tool(rec, "write_file", safety="write",
                          props={"path": {"type": "string"}, "content": {"type": "string"}},
                          key_field="path", body=body)]

    return tools


async def test_same_key_calls_do_not_overlap_and_keep_call_order(harness: HarnessFactory) -> None:
    log: list[tuple[str, str]] = []
    locks = ResourceLocks()
    h = harness("HEADLESS", allow_tools=["write_file"], tools=_tracing_writes(log), locks=locks)
    results = await h.run(
        h.call("write_file", {"path": "same.txt", "content": "a"}),
        h.call("write_file", {"path": "same.txt", "content": "b"}),
    )
    assert not any(r.is_error for r in results)
    assert log == [("enter", "a"), ("exit", "a"), ("enter", "b"), ("exit", "b")]
    assert len(locks) == 0  # entries are dropped when nobody holds them


async def test_different_keys_overlap(harness: HarnessFactory) -> None:
    log: list[tuple[str, str]] = []
    gates = {"a": asyncio.Event(), "b": asyncio.Event()}
    h = harness("HEADLESS", allow_tools=["write_file"], tools=_tracing_writes(log, gates))
    results = await h.run(
        h.call("write_file", {"path": "one.txt", "content": "a"}),
        h.call("write_file", {"path": "two.txt", "content": "b"}),
    )
    assert not any(r.is_error for r in results)
    assert [e for e, _ in log[:2]] == ["enter", "enter"]  # both inside before either left


async def test_locks_are_shared_across_sessions(harness: HarnessFactory) -> None:
    log: list[tuple[str, str]] = []
    locks = ResourceLocks()
    tools = _tracing_writes(log)
    one = harness("HEADLESS", allow_tools=["write_file"], tools=tools, locks=locks)
    two = harness("HEADLESS", allow_tools=["write_file"], tools=tools, locks=locks)
    await asyncio.gather(
        one.run(one.call("write_file", {"path": "shared", "content": "a"})),
        two.run(two.call("write_file", {"path": "shared", "content": "b"})),
    )
    assert [e for e, _ in log] == ["enter", "exit", "enter", "exit"]


async def test_resource_locks_release_on_cancel() -> None:
    locks = ResourceLocks()
    entered = asyncio.Event()

    async def holder() -> None:
        async with locks.hold(["k1", "k2"]):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(holder())
    await entered.wait()
    waiter = asyncio.ensure_future(locks.hold(["k2"]).__aenter__())
    await asyncio.sleep(0)
    assert not waiter.done()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await waiter  # acquired once the holder was cancelled
    assert len(locks) == 1  # only the waiter's key remains referenced


async def test_parallel_calls_run_concurrently_and_results_keep_call_order(
    harness: HarnessFactory,
) -> None:
    gates = {"a": asyncio.Event(), "b": asyncio.Event()}
    order: list[str] = []

    async def body(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        me = args["path"]
        other = "b" if me == "a" else "a"
        gates[me].set()
        await asyncio.wait_for(gates[other].wait(), 5)
        if me == "a":  # finish a after b
            for _ in range(5):
                await asyncio.sleep(0)
        order.append(me)
        return f"read {me}"

    h = harness(tools=lambda rec: [make_tool(rec, "read_file", body=body)])
    first, second = await h.run(h.call("read_file", {"path": "a"}),
                                h.call("read_file", {"path": "b"}))
    assert order == ["b", "a"]
    assert (first.text_content, second.text_content) == ("read a", "read b")


# -- deadlines and failures ----------------------------------------------------------------


async def test_deadline_overrun_is_uncertain_and_says_work_may_continue(
    harness: HarnessFactory,
) -> None:
    async def hang(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        await asyncio.Event().wait()
        return "never"

    def tools(rec: Recorder) -> list[ToolDef]:
        return [make_tool(rec, "web_fetch", safety="external", props={"url": {"type": "string"}},
                          body=hang, deadline_s=0.05)]

    h = harness("HEADLESS", allow_tools=["web_fetch"], tools=tools)
    res = await h.run_one("web_fetch", {"url": "http://127.0.0.1/slow"})
    assert res.is_error
    assert "exceeded its 0.05 s deadline" in res.text_content
    assert "may still be running" in res.text_content
    assert h.receipts.records[res.tool_use_id].status == "uncertain"
    assert h.timeline.kinds() == ["tool.proposed", "tool.started", "tool.timeout", "tool.finished"]
    assert h.timeline.entries[-1].payload["status"] == "uncertain"


async def test_a_handler_timeout_error_is_a_failure_not_a_deadline(
    harness: HarnessFactory,
) -> None:
    async def body(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        raise TimeoutError("upstream timed out")

    h = harness("HEADLESS", allow_tools=["write_file"],
                tools=lambda rec: [make_tool(rec, "write_file", safety="write", body=body)])
    res = await h.run_one("write_file", {"path": "a"})
    assert "timed out (TimeoutError)" in res.text_content
    assert "deadline" not in res.text_content
    assert h.receipts.records[res.tool_use_id].status == "failed"


async def test_tool_failure_message_reaches_the_model(harness: HarnessFactory) -> None:
    async def body(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        raise ToolFailure("a.txt is outside the workspace")

    h = harness("HEADLESS", allow_tools=["write_file"],
                tools=lambda rec: [make_tool(rec, "write_file", safety="write", body=body)])
    res = await h.run_one("write_file", {"path": "a"})
    assert res.is_error and res.text_content == "a.txt is outside the workspace"
    assert h.receipts.records[res.tool_use_id].status == "failed"


async def test_unexpected_exception_is_classified_without_details(harness: HarnessFactory) -> None:
    async def body(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        raise RuntimeError("token sk-secret-123 rejected at /srv/internal/path")

    h = harness(tools=lambda rec: [make_tool(rec, "read_file", body=body)])
    res = await h.run_one("read_file", {"path": "a"})
    assert res.is_error
    assert res.text_content.startswith("'read_file' failed: internal error (RuntimeError)")
    assert "sk-secret" not in res.text_content and "Traceback" not in res.text_content


async def test_file_not_found_is_classified(harness: HarnessFactory) -> None:
    async def body(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        raise FileNotFoundError(2, "No such file", "/x")

    h = harness(tools=lambda rec: [make_tool(rec, "read_file", body=body)])
    res = await h.run_one("read_file", {"path": "a"})
    assert "not found (FileNotFoundError)" in res.text_content


async def test_cancel_mid_dispatch_leaves_receipt_uncertain(harness: HarnessFactory) -> None:
    started = asyncio.Event()

    async def hang(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        started.set()
        await asyncio.Event().wait()
        return "never"

    h = harness("HEADLESS", allow_tools=["write_file"],
                tools=lambda rec: [make_tool(rec, "write_file", safety="write", body=hang)])
    task = asyncio.ensure_future(h.run(h.call("write_file", {"path": "a"}, id="c1")))
    await started.wait()
    task.cancel()
    results = await asyncio.gather(task, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert h.receipts.records["c1"].status == "uncertain"


# -- results -------------------------------------------------------------------------------


async def test_huge_output_is_truncated_with_a_marker(harness: HarnessFactory) -> None:
    big = "A" * 200_000 + "END"

    async def body(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        return big

    h = harness(tools=lambda rec: [make_tool(rec, "read_file", body=body)],
                max_result_chars=1_000)
    res = await h.run_one("read_file", {"path": "a"})
    text = res.text_content
    assert f"[... {len(big) - 1_000} of {len(big)} characters cut here" in text
    assert res.kept is not None and f"read_result(result_id=\"{res.kept.result_id}\"" in text
    assert text.startswith("A" * 700) and text.endswith("END")
    assert len(text) < 1_300


async def test_images_pass_through_and_json_is_serialised(harness: HarnessFactory) -> None:
    async def shot(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        return [TextBlock(text="screen"), ImageBlock(data="aGk=")]

    async def data(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        return {"rows": [1, 2], "name": "é"}

    def tools(rec: Recorder) -> list[ToolDef]:
        return [make_tool(rec, "read_file", body=data), make_tool(rec, "screenshot", body=shot)]

    h = harness(tools=tools)
    img, js = await h.run(h.call("screenshot", {"path": "x"}), h.call("read_file", {"path": "x"}))
    assert [type(b) for b in img.content] == [TextBlock, ImageBlock]
    assert js.text_content == '{"rows": [1, 2], "name": "é"}'


async def test_post_hook_adds_context_and_sees_output(harness: HarnessFactory) -> None:
    seen: list[tuple[str | None, bool]] = []
    hooks = HookRegistry()

    @hooks.on("PostToolUse")
    async def note(event: HookEvent) -> HookResult:
        seen.append((event.tool_output, event.is_error))
        return HookResult.add_context("file is generated; do not edit by hand")

    h = harness(hooks=hooks)
    res = await h.run_one("read_file")
    assert seen == [("read_file ok", False)]
    assert [b.text for b in res.content if isinstance(b, TextBlock)] == [
        "read_file ok", "[hook context] file is generated; do not edit by hand",
    ]


async def test_post_hook_withhold_says_the_tool_ran(harness: HarnessFactory) -> None:
    hooks = HookRegistry()
    hooks.register("PostToolUse", lambda e: HookResult.withhold("contains a credential"))
    h = harness("HEADLESS", allow_tools=["write_file"], hooks=hooks)
    res = await h.run_one("write_file")
    assert "write_file ok" not in res.text_content
    assert "withheld by a PostToolUse hook: contains a credential" in res.text_content
    assert "did run" in res.text_content
    assert h.rec.names() == ["write_file"]
    assert h.receipts.records[res.tool_use_id].status == "done"
    assert h.timeline.entries[-1].payload["withheld"] is True


async def test_raising_post_hook_withholds(harness: HarnessFactory) -> None:
    async def broken(event: HookEvent) -> HookResult:
        raise ValueError("redactor crashed")

    hooks = HookRegistry()
    hooks.register("PostToolUse", broken)
    h = harness(hooks=hooks)
    res = await h.run_one("read_file")
    assert "read_file ok" not in res.text_content
    assert "raised ValueError" in res.text_content and "did run" in res.text_content
    assert h.rec.names() == ["read_file"]  # ran exactly once


async def test_observers_see_lifecycle_and_cannot_break_it(harness: HarnessFactory) -> None:
    h = harness("DAEMON")

    def bad(event: str, data: Any) -> None:
        raise RuntimeError("dashboard down")

    h.executor._observers.subscribe(bad)  # type: ignore[union-attr]
    ok = await h.run_one("read_file")
    denied = await h.run_one("run_bash")
    assert not ok.is_error and denied.is_error
    assert [e for e, _ in h.events] == ["tool.started", "tool.finished", "tool.denied"]
    assert h.events[1][1]["status"] == "done"
    assert h.events[2][1]["check"] == "scope"


async def test_tool_events_reach_typed_observers_as_dataclasses(harness: HarnessFactory) -> None:
    from geode.hooks.events import ToolDenied, ToolFinished, ToolStarted

    h = harness("DAEMON")
    typed: list[object] = []
    h.executor._observers.subscribe_events(typed.append)  # type: ignore[union-attr]
    await h.run_one("read_file")
    await h.run_one("run_bash")
    assert [type(e) for e in typed] == [ToolStarted, ToolFinished, ToolDenied]
    finished, denied = typed[1], typed[2]
    assert isinstance(finished, ToolFinished) and finished.status == "done"
    assert isinstance(denied, ToolDenied) and denied.check == "scope" and denied.tool == "run_bash"
    assert [e for e, _ in h.events] == ["tool.started", "tool.finished", "tool.denied"]


async def test_duplicate_call_ids_run_once(harness: HarnessFactory) -> None:
    h = harness("HEADLESS", allow_tools=["write_file"])
    first, second = await h.run(h.call("write_file", id="same"), h.call("write_file", id="same"))
    assert not first.is_error
    assert second.text_content.startswith("denied by scope: duplicate")
    assert h.rec.names() == ["write_file"]


async def test_executor_is_a_tool_runner_and_survives_a_broken_timeline(
    harness: HarnessFactory,
) -> None:
    from geode.loop.protocols import ToolRunner

    h = harness()
    assert isinstance(h.executor, ToolRunner)

    async def broken_append(**kw: Any) -> None:
        raise ConnectionError("timeline store down")

    h.executor._timeline.append = broken_append  # type: ignore[union-attr,method-assign]
    res = await h.run_one("read_file")
    assert not res.is_error and h.rec.names() == ["read_file"]


async def test_empty_batch(harness: HarnessFactory) -> None:
    assert await harness().run() == []


async def test_a_bug_after_dispatch_is_a_result_not_a_raise(
    harness: HarnessFactory, monkeypatch: Any
) -> None:
    import geode.executor.executor as executor_mod

    def broken(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("bug in result building")

    monkeypatch.setattr(executor_mod, "build_result", broken)
    h = harness("HEADLESS", allow_tools=["write_file"])
    res = await h.run_one("write_file")
    assert res.is_error and "effect is uncertain" in res.text_content
    assert h.rec.names() == ["write_file"]  # ran once; not retried
