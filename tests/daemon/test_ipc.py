"""The IPC socket against an in-process daemon: event order, approvals, disconnects, lanes,
the home lock and bad paths. (Malformed frames: test_ipc_fuzz.py; real subprocesses:
tests/cli/test_cli_e2e.py.)"""

from __future__ import annotations

import asyncio
import gc
import os
import stat
import weakref
from pathlib import Path
from typing import Any

import pytest

from geode.daemon import Daemon, IPCClient
from geode.errors import ConfigError
from geode.messages import Message, ModelResponse, TextBlock, Usage
from geode.providers.base import BaseProvider, ModelRequest
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import load_settings
from tests.daemon.conftest import DaemonMaker, free_port, run_ipc

WRITE = {"tool": "write_file", "input": {"path": "out.txt", "content": "hello"}}


_CORE = {"turn_started", "tool_call", "tool_result", "assistant_text", "turn_finished"}


def _events(frames: list[dict[str, Any]]) -> list[str]:
    """The core event kinds in arrival order (checkpoint / model_response left out)."""
    return [f["kind"] for f in frames if f["type"] == "event" and f["kind"] in _CORE]


async def _idle(daemon: Daemon) -> None:
    """Wait until no turn runs (a polling deadline, not a timing assertion)."""
    for _ in range(400):
        if not daemon._active and daemon.ipc is not None and not daemon.ipc.runs:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the daemon still runs a turn")


async def test_events_stream_in_order_then_the_result(make_daemon: DaemonMaker,
                                                      home: Path) -> None:
    d = await make_daemon([{"tool": "list_dir", "input": {"path": "."}}, "all done"])
    mode = stat.S_IMODE(os.stat(d.socket_path).st_mode)
    assert mode == 0o600
    frames = await run_ipc(d.socket_path, {"type": "run", "id": "r1", "prompt": "look"})
    assert _events(frames) == ["turn_started", "tool_call", "tool_result", "assistant_text",
                               "turn_finished"]
    seqs = [f["seq"] for f in frames if f["type"] == "event"]
    assert seqs == list(range(1, len(seqs) + 1))
    assert all(f["id"] == "r1" for f in frames)
    result = frames[-1]
    assert result["type"] == "result" and result["termination"] == "natural"
    assert result["text"] == "all done"
    assert result["tool_calls"] == [{"name": "list_dir", "status": "ok"}]
    record = await d.runtime.store.sessions.get(result["session_id"])  # type: ignore[union-attr]
    assert record is not None and record.mode == "IPC"


@pytest.mark.parametrize(("answer", "status", "written"), [("deny", "denied", False),
                                                            ("allow", "ok", True)])
async def test_the_clients_approval_answer_decides(
    make_daemon: DaemonMaker, home: Path, answer: str, status: str, written: bool
) -> None:
    d = await make_daemon([WRITE, "ok"])
    ws = home / "ws"
    ws.mkdir()
    asked: list[dict[str, Any]] = []

    def reply(msg: dict[str, Any]) -> str:
        asked.append(msg)
        return answer

    frames = await run_ipc(d.socket_path, {"type": "run", "id": "r2", "prompt": "write",
                                           "cwd": str(ws)}, reply)
    assert [(a["tool"], a["input"]) for a in asked] == [("write_file", WRITE["input"])]
    # the client is shown what will change (a diff of the new file), not truncated JSON
    path, content = WRITE["input"]["path"], WRITE["input"]["content"]
    assert asked[0]["summary"].startswith(f"write_file {path} (new file)")
    assert f"+++ b/{path}" in asked[0]["summary"]
    assert all(f"+{line}" in asked[0]["summary"] for line in content.splitlines())
    tool_result = next(f for f in frames if f.get("kind") == "tool_result")
    assert tool_result["data"]["status"] == status
    if not written:
        assert tool_result["data"]["text"].startswith("denied by approval")
    assert (ws / "out.txt").exists() is written


async def test_a_client_that_vanishes_mid_turn_leaves_a_finished_checkpointed_turn(
    make_daemon: DaemonMaker, home: Path
) -> None:
    # one scripted model for the whole daemon, so the second turn continues the script
    shared = ScriptedProvider(["first answer", ToolCall("write_file", WRITE["input"]),
                               "finished without the file"], latency=0.05)
    d = await make_daemon([], provider_factory=lambda: shared)
    first = await run_ipc(d.socket_path, {"type": "run", "id": "a", "prompt": "hi"})
    sid = first[-1]["session_id"]
    store = d.runtime.store  # type: ignore[union-attr]
    before = len(await store.checkpoints.list(sid))

    client = await IPCClient.connect(d.socket_path)
    await client.send({"type": "run", "id": "b", "prompt": "write it", "session_id": sid,
                       "cwd": str(home)})
    while True:  # read up to the approval request, then vanish without answering
        msg = await asyncio.wait_for(client.recv(), 10)
        assert msg is not None
        if msg["type"] == "approval_request":
            break
    await client.close()
    await _idle(d)

    restored = await store.checkpointer(sid).load()
    assert restored is not None
    texts = [m.text for m in restored.messages if m.role == "assistant" and m.text]
    # the turn went on after the disconnect and its final answer was checkpointed
    assert texts == ["first answer", "finished without the file"]
    assert len(await store.checkpoints.list(sid)) > before
    rows = await store.timeline.list(sid)
    denied = [r for r in rows if r.kind == "tool.denied"]
    assert denied and denied[0].payload["check"] == "approval"  # vanished client ⇒ denial
    assert not (home / "out.txt").exists()


class _Recording(BaseProvider):
    """Answers after a pause, recording when each call started and ended."""

    name = "recording"

    def __init__(self, log: list[str], gate: asyncio.Event | None = None) -> None:
        self.log = log
        self.gate = gate

    async def complete(self, request: ModelRequest) -> ModelResponse:
        prompt = next(m.text for m in reversed(request.messages) if m.role == "user")
        self.log.append(f"start:{prompt}")
        if self.gate is not None:
            await self.gate.wait()
        else:
            await asyncio.sleep(0.05)
        self.log.append(f"end:{prompt}")
        return ModelResponse(message=Message(role="assistant", content=[TextBlock(text="ok")]),
                             stop_reason="end_turn", usage=Usage(), model=request.model)


async def test_two_requests_to_one_session_serialise_other_sessions_overlap(
    make_daemon: DaemonMaker,
) -> None:
    log: list[str] = []
    d = await make_daemon([], provider_factory=lambda: _Recording(log))
    first = await run_ipc(d.socket_path, {"type": "run", "id": "0", "prompt": "p0"})
    sid = first[-1]["session_id"]
    log.clear()
    results = await asyncio.gather(
        run_ipc(d.socket_path, {"type": "run", "id": "1", "prompt": "A", "session_id": sid}),
        run_ipc(d.socket_path, {"type": "run", "id": "2", "prompt": "B", "session_id": sid}),
    )
    assert all(r[-1]["type"] == "result" for r in results)
    assert log in (["start:A", "end:A", "start:B", "end:B"],
                   ["start:B", "end:B", "start:A", "end:A"])
    log.clear()
    await asyncio.gather(
        run_ipc(d.socket_path, {"type": "run", "id": "3", "prompt": "C"}),
        run_ipc(d.socket_path, {"type": "run", "id": "4", "prompt": "D"}),
    )
    assert log[:2] in (["start:C", "start:D"], ["start:D", "start:C"])  # ran side by side


async def test_requests_beyond_the_cap_queue_then_busy_after_the_bound(
    make_daemon: DaemonMaker,
) -> None:
    log: list[str] = []
    gate = asyncio.Event()
    d = await make_daemon(
        [], provider_factory=lambda: _Recording(log, gate),
        env={"GEODE_LANES__GLOBAL_CAP": "2", "GEODE_LANES__CLI_CAP": "2",
             "GEODE_LANES__CHANNEL_CAP": "2", "GEODE_LANES__WAIT_TIMEOUT_S": "30"},
    )
    runs = [asyncio.create_task(run_ipc(d.socket_path, {"type": "run", "id": str(i),
                                                        "prompt": f"q{i}"}))
            for i in range(4)]
    for _ in range(200):
        if len(log) >= 2 and d.lanes.stats.waiting == 2:
            break
        await asyncio.sleep(0.01)
    assert len(log) == 2 and d.lanes.stats.waiting == 2  # two run, two queue
    d.lanes.wait_timeout_s = 0.1
    busy = await run_ipc(d.socket_path, {"type": "run", "id": "late", "prompt": "late"})
    assert busy[-1]["type"] == "error" and busy[-1]["code"] == "busy"
    assert "busy" in busy[-1]["message"]
    gate.set()
    done = await asyncio.gather(*runs)
    assert [r[-1]["type"] for r in done] == ["result"] * 4  # the queued ones ran
    text = d.metrics.render().decode()
    assert 'geode_lane_busy_total{kind="cli"} 1.0' in text


async def test_unknown_session_is_a_config_error_frame(make_daemon: DaemonMaker) -> None:
    d = await make_daemon(["x"])
    frames = await run_ipc(d.socket_path, {"type": "run", "id": "r", "prompt": "p",
                                           "session_id": "s-nope"})
    assert frames[-1]["type"] == "error" and frames[-1]["code"] == "config"
    assert "s-nope" in frames[-1]["message"]


async def test_a_second_daemon_on_the_same_home_is_refused_and_a_stale_socket_cleaned(
    make_daemon: DaemonMaker, home: Path
) -> None:
    (home / "cli.sock").write_text("stale")  # left by a daemon that died
    d = await make_daemon(["x"])
    assert stat.S_ISSOCK(os.stat(d.socket_path).st_mode)
    settings, secrets = load_settings(env={"GEODE_HOME": str(home),
                                           "GEODE_HEALTH_PORT": str(free_port())})
    second = Daemon(settings=settings, secrets=secrets)
    with pytest.raises(ConfigError, match=f"pid {os.getpid()}.*already running"):
        await second.start()
    # the refused daemon left the running one alone
    frames = await run_ipc(d.socket_path, {"type": "run", "id": "r", "prompt": "p"})
    assert frames[-1]["type"] == "result"
    await d.shutdown()
    assert not d.socket_path.exists()


async def test_socket_path_too_long_or_unwritable_is_a_clear_config_error(home: Path) -> None:
    deep = home / ("x" * 60) / ("y" * 60)
    settings, secrets = load_settings(env={"GEODE_HOME": str(deep)})
    with pytest.raises(ConfigError, match="at most 107"):
        await Daemon(settings=settings, secrets=secrets).start()
    blocker = home / "file"
    blocker.write_text("")
    settings, secrets = load_settings(env={"GEODE_HOME": str(blocker / "sub")})
    with pytest.raises(ConfigError, match="GEODE_HOME"):
        await Daemon(settings=settings, secrets=secrets).start()


async def test_shutdown_past_the_drain_bound_cancels_checkpoints_and_answers_waiters(
    make_daemon: DaemonMaker,
) -> None:
    log: list[str] = []
    gate = asyncio.Event()  # never set: the turn would run forever
    d = await make_daemon([], provider_factory=lambda: _Recording(log, gate),
                          drain_timeout_s=0.2,
                          env={"GEODE_LANES__GLOBAL_CAP": "1", "GEODE_LANES__CLI_CAP": "1",
                               "GEODE_LANES__CHANNEL_CAP": "1"})
    running = asyncio.create_task(run_ipc(d.socket_path, {"type": "run", "id": "long",
                                                          "prompt": "forever"}))
    waiting = asyncio.create_task(run_ipc(d.socket_path, {"type": "run", "id": "queued",
                                                          "prompt": "later"}))
    for _ in range(200):
        if log and d.lanes.stats.waiting == 1:
            break
        await asyncio.sleep(0.01)
    assert log == ["start:forever"] and d.lanes.stats.waiting == 1
    await d.shutdown()
    long_frames, queued_frames = await asyncio.gather(running, waiting)
    result = long_frames[-1]
    assert result["type"] == "result" and result["termination"] == "cancelled"
    assert queued_frames[-1] == {"type": "error", "id": "queued", "code": "shutdown",
                                 "message": "the daemon is shutting down; try again later"}
    assert not d.socket_path.exists()
    # the stopped turn was checkpointed `paused`, so its session resumes next time
    from geode.store import open_store

    async with await open_store(d.settings.store_url) as store:
        record = await store.sessions.get(result["session_id"])
    assert record is not None and record.status == "paused"


async def test_settle_heap_freezes_startup_objects_and_the_daemon_still_serves(
    make_daemon: DaemonMaker,
) -> None:
    # `geode serve` settles the heap once started: what startup built is frozen out of the
    # cyclic collector's scans (a gen-2 pass over it paused bursts for 100+ ms), and
    # garbage made afterwards is still collected.
    before = gc.get_freeze_count()
    try:
        d = await make_daemon(["done"], settle_heap=True)
        assert gc.get_freeze_count() > before
        frames = await run_ipc(d.socket_path, {"type": "run", "id": "r", "prompt": "p"})
        assert frames[-1]["type"] == "result"

        class Cycle:
            me: object = None

        probe = Cycle()
        probe.me = probe
        gone = weakref.ref(probe)
        del probe
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()  # later tests see an ordinary heap
