"""Durable-round benchmark: GEODE's checkpoint chain vs LangGraph + langgraph-checkpoint-sqlite.

One *round* is what a tool-using turn does per model response, two checkpointed steps:

* GEODE: append the assistant's tool_use message -> ``save_batch_proposed`` (committed
  before the tool runs) | run a trivial tool -> append its result -> ``save_batch_done``;
* LangGraph: an ``agent`` node (a fake chat model answering with one tool call) | a
  ``tools`` node (the same trivial tool), each super-step checkpointed by
  ``AsyncSqliteSaver``: the same number of checkpointed steps.

Both run in this process, on the same disk (a temporary directory, or ``--dir``),
alternating in ``--trials`` trials after a discarded warm-up, with a full GC before each
trial. Prints per-step and per-round median and p99 for every variant, the ratios (target:
GEODE <= 0.5x LangGraph per round on SQLite), GEODE on PostgreSQL when ``--pg URL`` /
``GEODE_TEST_PG_URL`` is given, and the time to resume a 500-message session (<= 50 ms).

What differs between the two, so the rows are read right:

* LangGraph's default ``durability="async"`` writes a step's checkpoint in the background
  while the next step runs; ``durability="sync"`` waits for it, which is what GEODE's
  save-before-execute does. Both are shown.
* GEODE runs SQLite with ``synchronous=NORMAL`` (WAL; a commit survives a killed process,
  not a power cut); LangGraph's connection keeps SQLite's default ``FULL`` (an fsync per
  commit). The "synchronous=FULL" GEODE row uses LangGraph's setting.

Run: ``pip install -e '.[bench]'`` then ``python benchmarks/bench_durable.py --rounds 200``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import event

from geode.loop.protocols import TurnInfo
from geode.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from geode.store import Store, open_store

try:  # bench-only optional dependency (pyproject extra "bench")
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    HAVE_LANGGRAPH = True
except ImportError:  # pragma: no cover - reported at run time
    HAVE_LANGGRAPH = False

WARMUP_ROUNDS = 20


@dataclass
class Samples:
    """Seconds per checkpointed step and per round (two steps), pooled over trials."""

    steps: list[float] = field(default_factory=list)
    rounds: list[float] = field(default_factory=list)

    def extend(self, other: Samples) -> None:
        self.steps += other.steps
        self.rounds += other.rounds


def _stats(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def trivial_tool(path: str) -> str:
    return f"contents of {path}"


async def geode_rounds(store: Store, rounds: int) -> Samples:
    sid = await store.sessions.create(mode="HEADLESS", model="bench")
    cp = store.checkpointer(sid)
    messages: list[Message] = [Message.user("read the files")]
    await cp.save(messages=messages, state={"round": 0}, status="active", kind="turn_start")
    out = Samples()
    for r in range(rounds):
        turn = TurnInfo(
            session_id=sid, turn_id="t1", round=r, correlation_id=f"c{r}", mode="HEADLESS"
        )
        start = time.perf_counter()
        # Step 1: the model proposed a tool call; it is durable before the tool runs.
        call = ToolUseBlock(id=f"call-{r}", name="read", input={"path": f"/f/{r}"})
        messages.append(Message(role="assistant", content=[TextBlock(text="reading"), call]))
        state = {"round": r, "guards": {"rounds_left": rounds - r}}
        await cp.save_batch_proposed(messages=messages, state=state, turn=turn)
        mid = time.perf_counter()
        # Step 2: the tool ran; its result is saved.
        result = trivial_tool(**call.input)
        messages.append(Message(role="user", content=[ToolResultBlock.text(call.id, result)]))
        await cp.save_batch_done(messages=messages, state=state, turn=turn)
        end = time.perf_counter()
        out.steps += [mid - start, end - mid]
        out.rounds.append(end - start)
    return out


async def geode_resume(store: Store, n_messages: int = 500, repeats: int = 30) -> list[float]:
    sid = await store.sessions.create(mode="HEADLESS", model="bench")
    msgs = [Message.user(f"message {i} " + "x" * 200) for i in range(n_messages)]
    await store.checkpointer(sid).save(messages=msgs, state={"round": 1}, status="active")
    samples = []
    gc.collect()
    for _ in range(repeats):
        start = time.perf_counter()
        restored = await store.checkpointer(sid).load()  # a fresh checkpointer: nothing cached
        samples.append(time.perf_counter() - start)
        assert restored is not None and restored.messages == msgs
    return samples


async def langgraph_rounds(
    saver: Any, rounds: int, *, thread_id: str, durability: Literal["sync", "async"]
) -> Samples:
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
        marks.append(time.perf_counter())
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        call = last.tool_calls[0]
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
    app = graph.compile(checkpointer=saver)
    config: RunnableConfig = {
        "configurable": {"thread_id": thread_id},
        "recursion_limit": 2 * rounds + 10,
    }
    start: MessagesState = {"messages": [HumanMessage(content="read the files")]}
    await app.ainvoke(start, config, durability=durability)
    # marks: agent0, tools0, agent1, tools1, ..., agentN (the final answer).
    steps = [b - a for a, b in itertools.pairwise(marks)]
    agents = marks[0::2]
    return Samples(steps=steps, rounds=[b - a for a, b in itertools.pairwise(agents)])


def _full_sync(store: Store) -> None:
    """Give this store's hot-path connections LangGraph's ``synchronous=FULL``."""

    @event.listens_for(store.sync_engine, "connect")
    def _full(dbapi_conn: Any, _record: Any) -> None:  # runs after GEODE's own hook
        dbapi_conn.execute("PRAGMA synchronous = FULL")


Runner = Callable[[int, int], Awaitable[Samples]]


async def run_trials(runners: dict[str, Runner], *, rounds: int, trials: int) -> dict[str, Samples]:
    """Warm each runner up, then alternate them ``trials`` times; pool the samples."""
    for run in runners.values():
        await run(WARMUP_ROUNDS, -1)
    pooled = {name: Samples() for name in runners}
    for trial in range(trials):
        for name, run in runners.items():
            gc.collect()
            pooled[name].extend(await run(rounds, trial))
    return pooled


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f}"


def print_table(results: dict[str, Samples]) -> dict[str, float]:
    """One line per variant; returns the per-round medians."""
    width = max(len(n) for n in results) + 2
    print(f"{'':{width}} {'per checkpointed step':>23}   {'per round (2 steps)':>23}")
    print(f"{'':{width}} {'median':>11} {'p99':>11}   {'median':>11} {'p99':>11}   (ms)")
    medians = {}
    for name, s in results.items():
        step_med, step_p99 = _stats(s.steps)
        round_med, round_p99 = _stats(s.rounds)
        medians[name] = round_med
        print(
            f"{name:<{width}} {_ms(step_med):>11} {_ms(step_p99):>11}   "
            f"{_ms(round_med):>11} {_ms(round_p99):>11}   n={len(s.rounds)}"
        )
    return medians


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="rounds per trial")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where the SQLite files go")
    parser.add_argument("--pg", default=os.environ.get("GEODE_TEST_PG_URL", ""))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        print(
            f"durable rounds: {args.trials} trials x {args.rounds} rounds (+{WARMUP_ROUNDS} "
            f"warm-up), disk: {root}\nPython {platform.python_version()}, SQLite "
            f"{sqlite3.sqlite_version}, {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.2f}"
        )
        stores: list[Store] = []
        try:
            normal = await open_store(f"sqlite:///{root / 'geode.db'}")
            stores.append(normal)
            full = await open_store(f"sqlite:///{root / 'geode-full.db'}")
            stores.append(full)
            _full_sync(full)
            runners: dict[str, Runner] = {
                "GEODE, SQLite (synchronous=NORMAL)": lambda n, _t: geode_rounds(normal, n),
                "GEODE, SQLite (synchronous=FULL)": lambda n, _t: geode_rounds(full, n),
            }
            lg_names: dict[Literal["sync", "async"], str] = {
                "async": "LangGraph + AsyncSqliteSaver (durability=async, default)",
                "sync": "LangGraph + AsyncSqliteSaver (durability=sync)",
            }
            savers = []
            if HAVE_LANGGRAPH:
                for mode in lg_names:
                    cm = AsyncSqliteSaver.from_conn_string(str(root / f"langgraph-{mode}.db"))
                    savers.append(cm)
                    saver = await cm.__aenter__()

                    def lg_runner(
                        n: int, t: int, saver: Any = saver, mode: Literal["sync", "async"] = mode
                    ) -> Awaitable[Samples]:
                        return langgraph_rounds(
                            saver, n, thread_id=f"{mode}-{t}-{n}", durability=mode
                        )

                    runners[lg_names[mode]] = lg_runner
            if args.pg:
                pg = await open_store(args.pg)
                stores.append(pg)
                runners["GEODE, PostgreSQL (psycopg)"] = lambda n, _t: geode_rounds(pg, n)

            results = await run_trials(runners, rounds=args.rounds, trials=args.trials)
            resume = {"GEODE, SQLite": await geode_resume(normal)}
            if args.pg:
                resume["GEODE, PostgreSQL"] = await geode_resume(pg)
            for cm in savers:
                await cm.__aexit__(None, None, None)
        finally:
            for s in stores:
                await s.aclose()

    print()
    medians = print_table(results)
    ours = medians["GEODE, SQLite (synchronous=NORMAL)"]
    ours_full = medians["GEODE, SQLite (synchronous=FULL)"]
    print("\nratio GEODE/LangGraph, per-round median (target <= 0.50x):")
    if not HAVE_LANGGRAPH:
        print("  LangGraph not installed: pip install -e '.[bench]'")
    else:
        lg_async, lg_sync = medians[lg_names["async"]], medians[lg_names["sync"]]
        print(f"  GEODE (NORMAL) vs LangGraph durability=async (default): {ours / lg_async:5.2f}x")
        print(f"  GEODE (NORMAL) vs LangGraph durability=sync:            {ours / lg_sync:5.2f}x")
        print(
            f"  GEODE (FULL)   vs LangGraph durability=sync (same fsync, same wait): "
            f"{ours_full / lg_sync:5.2f}x"
        )
    print("\nresume of a 500-message session (target <= 50 ms):")
    for name, samples in resume.items():
        med, p99 = _stats(samples)
        print(f"  {name:<20} median {_ms(med)} ms   p99 {_ms(p99)} ms   n={len(samples)}")


if __name__ == "__main__":
    asyncio.run(main())
