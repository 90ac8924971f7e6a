"""Durable-round benchmark: GEODE's checkpoint chain vs LangGraph + langgraph-checkpoint-sqlite.

One *round* is what a tool-using turn does per model response:

* GEODE: append the assistant's tool_use message -> ``save_batch_proposed`` (before the
  tool runs) -> run a trivial tool -> append its result -> ``save_batch_done``;
* LangGraph: an ``agent`` node (a fake chat model answering with one tool call) and a
  ``tools`` node (the same trivial tool), each super-step checkpointed by
  ``AsyncSqliteSaver``, i.e. the same number of checkpointed steps.

Both run in this process, on the same disk (a temporary directory, or ``--dir``). Prints the
per-round median and p99 for both, the ratio (target: GEODE <= 0.5x LangGraph on SQLite),
GEODE on PostgreSQL when ``--pg URL`` / ``GEODE_TEST_PG_URL`` is given, and the time to
resume a 500-message session (target <= 50 ms).

Run: ``pip install -e '.[bench]'`` then ``python benchmarks/bench_durable.py --rounds 200``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from geode.loop.protocols import TurnInfo
from geode.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from geode.store import Store, open_store

try:  # bench-only optional dependency (pyproject extra "bench")
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    HAVE_LANGGRAPH = True
except ImportError:  # pragma: no cover - reported at run time
    HAVE_LANGGRAPH = False


def _stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def trivial_tool(path: str) -> str:
    return f"contents of {path}"


async def geode_rounds(store: Store, rounds: int) -> list[float]:
    sid = await store.sessions.create(mode="HEADLESS", model="bench")
    cp = store.checkpointer(sid)
    messages: list[Message] = [Message.user("read the files")]
    await cp.save(messages=messages, state={"round": 0}, status="active", kind="turn_start")
    samples: list[float] = []
    for r in range(rounds):
        turn = TurnInfo(
            session_id=sid, turn_id="t1", round=r, correlation_id=f"c{r}", mode="HEADLESS"
        )
        start = time.perf_counter()
        call = ToolUseBlock(id=f"call-{r}", name="read", input={"path": f"/f/{r}"})
        messages.append(Message(role="assistant", content=[TextBlock(text="reading"), call]))
        state = {"round": r, "guards": {"rounds_left": rounds - r}}
        await cp.save_batch_proposed(messages=messages, state=state, turn=turn)
        result = trivial_tool(**call.input)
        messages.append(Message(role="user", content=[ToolResultBlock.text(call.id, result)]))
        await cp.save_batch_done(messages=messages, state=state, turn=turn)
        samples.append(time.perf_counter() - start)
    return samples


async def geode_resume(store: Store, n_messages: int = 500, repeats: int = 20) -> list[float]:
    sid = await store.sessions.create(mode="HEADLESS", model="bench")
    msgs = [Message.user(f"message {i} " + "x" * 200) for i in range(n_messages)]
    await store.checkpointer(sid).save(messages=msgs, state={"round": 1}, status="active")
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        restored = await store.checkpointer(sid).load()
        samples.append(time.perf_counter() - start)
        assert restored is not None and len(restored.messages) == n_messages
    return samples


async def langgraph_rounds(db_path: Path, rounds: int) -> list[float] | None:
    if not HAVE_LANGGRAPH:
        return None

    marks: list[float] = []

    def agent(state: MessagesState) -> dict[str, Any]:
        # A fake chat model: one tool call per round, then a final answer.
        marks.append(time.perf_counter())
        done = sum(isinstance(m, ToolMessage) for m in state["messages"])
        if done >= rounds:
            return {"messages": [AIMessage(content="done")]}
        call = {"name": "read", "args": {"path": f"/f/{done}"}, "id": f"call-{done}"}
        return {"messages": [AIMessage(content="reading", tool_calls=[call])]}

    def tools(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        call = last.tool_calls[0]  # type: ignore[attr-defined]
        return {
            "messages": [ToolMessage(content=trivial_tool(**call["args"]), tool_call_id=call["id"])]
        }

    def route(state: MessagesState) -> str:
        return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", tools)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route)
    graph.add_edge("tools", "agent")
    async with AsyncSqliteSaver.from_conn_string(str(db_path)) as saver:
        app = graph.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * rounds + 10}
        await app.ainvoke({"messages": [HumanMessage(content="read the files")]}, config)
    # Round r = from agent step r to agent step r+1 (model, checkpoint, tool, checkpoint).
    return [b - a for a, b in itertools.pairwise(marks)]


def _row(name: str, samples: list[float]) -> tuple[float, float]:
    med, p99 = _stats(samples)
    print(f"  {name:<34} median {med * 1000:8.3f} ms   p99 {p99 * 1000:8.3f} ms   n={len(samples)}")
    return med, p99


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=None, help="where the SQLite files go")
    parser.add_argument("--pg", default=os.environ.get("GEODE_TEST_PG_URL", ""))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        print(f"durable rounds: {args.rounds}, disk: {root}")
        async with await open_store(f"sqlite:///{root / 'geode.db'}") as store:
            ours = await geode_rounds(store, args.rounds)
            resume = await geode_resume(store)
        lg = await langgraph_rounds(root / "langgraph.db", args.rounds)

        print("per round (save batch -> trivial tool -> save result):")
        ours_med, _ = _row("GEODE, SQLite (aiosqlite)", ours)
        if lg is None:
            print("  LangGraph not installed: pip install -e '.[bench]'")
        else:
            lg_med, _ = _row("LangGraph + AsyncSqliteSaver", lg)
            print(f"  ratio GEODE/LangGraph (median): {ours_med / lg_med:.2f}x (target <= 0.50x)")
        if args.pg:
            async with await open_store(args.pg) as pg_store:
                # Each run in a fresh session; tables are shared with other runs.
                pg = await geode_rounds(pg_store, args.rounds)
                pg_resume = await geode_resume(pg_store)
            _row("GEODE, PostgreSQL (psycopg)", pg)
        print("resume of a 500-message session (target <= 50 ms):")
        _row("GEODE, SQLite", resume)
        if args.pg:
            _row("GEODE, PostgreSQL", pg_resume)


if __name__ == "__main__":
    asyncio.run(main())
