"""The thin CLI end to end: real `geode serve` and `geode ask` subprocesses, scripted model."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from geode.store import open_store
from tests.daemon.conftest import CLI, env_for, geode, start_serve, write_script

pytestmark = pytest.mark.slow

WRITE = {"tool": "write_file", "input": {"path": "e2e.txt", "content": "x"}}
CORE = {"turn_started", "tool_call", "tool_result", "assistant_text", "turn_finished"}


def _frames(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def _flow(frames: list[dict[str, Any]]) -> list[str]:
    return [f["kind"] if f["type"] == "event" else f["type"] for f in frames
            if f["type"] != "event" or f["kind"] in CORE]


async def _wait_checkpointed(home: Path, sid: str, *, messages: int) -> None:
    async with await open_store(f"sqlite:///{home / 'geode.db'}", migrate=False) as store:
        for _ in range(200):
            rows = await store.checkpoints.list(sid, limit=1)
            if rows and rows[-1].message_count >= messages:
                denied = [r for r in await store.timeline.list(sid) if r.kind == "tool.denied"]
                assert len(denied) == 2  # the "n", and the client that vanished
                return
            await asyncio.sleep(0.05)
    raise AssertionError("the turn of the vanished client was not checkpointed")


def test_ask_without_a_daemon_says_how_to_start_one(home: Path) -> None:
    done = geode(home, "ask", "hello")
    assert done.returncode == 2
    assert f"no daemon at {home / 'cli.sock'}; start one with `geode serve`" in done.stderr


def test_ask_streams_in_order_denies_on_n_and_survives_a_vanished_client(home: Path) -> None:
    script = write_script(home / "s.json", [{"tool": "list_dir", "input": {}}, WRITE, "done"])
    serve = start_serve(home, script=script)
    try:
        # 1. events in order; the approval prompt answered "n" denies write_file
        done = geode(home, "ask", "--jsonl", "do it", stdin="n\n")
        assert done.returncode == 0, done.stderr
        frames = _frames(done.stdout)
        assert _flow(frames) == [
            "turn_started", "tool_call", "tool_result",          # list_dir
            "tool_call", "approval_request", "tool_result",      # write_file, asked, denied
            "assistant_text", "turn_finished", "result",
        ]
        seqs = [f["seq"] for f in frames if f["type"] == "event"]
        assert seqs == sorted(seqs)
        denied = [f for f in frames if f.get("kind") == "tool_result"][1]["data"]
        assert denied["status"] == "denied" and denied["text"].startswith("denied by approval")
        assert "? approve write_file" in done.stderr
        assert not (home / "e2e.txt").exists()
        sid = frames[-1]["session_id"]

        # 2. a client that vanishes while asked: the turn goes on and is checkpointed
        proc = subprocess.Popen([*CLI, "ask", "--jsonl", "--session", sid, "again"],
                                env=env_for(home), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, cwd=str(home))
        assert proc.stdout is not None
        for line in proc.stdout:
            if json.loads(line)["type"] == "approval_request":
                break
        proc.kill()
        proc.wait(10)
        asyncio.run(_wait_checkpointed(home, sid, messages=12))  # 2 turns x 6 messages
        shown = geode(home, "sessions", "show", sid, "--json")
        info = json.loads(shown.stdout)
        assert info["status"] == "active" and info["mode"] == "IPC"
        assert info["last_checkpoint"]["last_termination"] == "natural"
        assert info["last_checkpoint"]["message_count"] == 12

        # 3. the daemon still serves
        again = geode(home, "ask", "--json", "once more", stdin="y\n")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["tool_calls"][1] == {"name": "write_file",
                                                             "status": "ok"}
        assert (home / "e2e.txt").read_text() == "x"  # the client's cwd is the workspace
    finally:
        assert serve.stop() == 0, serve.output()


def test_sigterm_during_a_turn_finishes_it_exits_0_and_removes_the_socket(home: Path) -> None:
    script = write_script(home / "slow.json", ["slow answer"], latency=0.8)
    serve = start_serve(home, script=script)
    proc = subprocess.Popen([*CLI, "ask", "--jsonl", "wait for it"], env=env_for(home),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                            cwd=str(home))
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())
    assert first["kind"] == "turn_started"  # the turn is running now
    code = serve.stop(signal.SIGTERM)
    rest = _frames(proc.stdout.read())
    assert proc.wait(10) == 0
    assert code == 0, serve.output()
    assert rest[-1]["type"] == "result" and rest[-1]["text"] == "slow answer"
    assert not (home / "cli.sock").exists()
    assert serve.output().rstrip().endswith("geode serve: stopped")


def test_repl_runs_turns_in_process_with_approvals_and_commands(home: Path) -> None:
    script = write_script(home / "r.json", [WRITE, "tried to write"])
    done = geode(home, "repl", "--cwd", str(home),
                 stdin="write it\nn\n/status\n/model\n/new\nwrite again\ny\n/exit\n",
                 GEODE_SCRIPTED_MODEL=str(script))
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert err.count("? approve write_file") == 2
    assert "✗ denied: denied by approval" in err  # the "n"
    assert "mode REPL" in err and "messages 4" in err  # /status after one turn
    assert "new session" in err
    assert done.stdout.count("tried to write") == 2
    assert (home / "e2e.txt").read_text() == "x"  # the "y" in the new session wrote it


def test_repl_ctrl_c_stops_the_running_turn_and_keeps_the_session(home: Path) -> None:
    # The model takes 60 s to answer: only a stopped turn lets this test end in time.
    script = write_script(home / "slow.json", ["too late"], latency=60.0)
    proc = subprocess.Popen(
        [*CLI, "repl", "--cwd", str(home)], env=env_for(home, GEODE_SCRIPTED_MODEL=str(script)),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=str(home),
    )
    try:
        assert proc.stdin is not None and proc.stderr is not None
        banner = proc.stderr.readline()
        assert banner.startswith("geode repl: session "), banner
        sid = banner.split()[3].rstrip(",")
        proc.stdin.write("hello\n")
        proc.stdin.flush()
        # The turn's first checkpoint (the user message) is written before the model call.
        asyncio.run(_wait_turn_started(home, sid))
        proc.send_signal(signal.SIGINT)
        proc.stdin.write("/status\n/exit\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "[cancelled] the turn was stopped" in err
    assert "last turn cancelled" in err  # /status after it: the REPL went on
    assert "too late" not in out


async def _wait_turn_started(home: Path, sid: str) -> None:
    async with await open_store(f"sqlite:///{home / 'geode.db'}", migrate=False) as store:
        for _ in range(400):
            if await store.checkpoints.list(sid, limit=1):
                return
            await asyncio.sleep(0.05)
    raise AssertionError("the REPL's turn never started")


def test_ask_and_repl_say_they_are_waiting_for_a_slow_model(home: Path) -> None:
    """Issue #23 item 3: a silent model call shows "waiting for the model" in the terminal
    of `ask` (relayed by the daemon) and of `repl` (the notice interval is shortened)."""
    script = write_script(home / "slow.json", ["slow answer"], latency=1.5)
    fast = {"GEODE_MODEL__WAITING_NOTICE_S": "0.2"}
    serve = start_serve(home, script=script, **fast)
    try:
        done = geode(home, "ask", "take your time")
        assert done.returncode == 0, done.stderr
        assert "waiting for the model (" in done.stderr
        assert "slow answer" in done.stdout and "waiting" not in done.stdout
        as_json = geode(home, "ask", "--json", "again")
        assert json.loads(as_json.stdout)["text"] == "slow answer"  # stdout: the object only
        assert "waiting for the model (" in as_json.stderr
    finally:
        assert serve.stop() == 0, serve.output()
    done = geode(home, "repl", "--cwd", str(home), stdin="take your time\n/exit\n",
                 GEODE_SCRIPTED_MODEL=str(script), **fast)
    assert done.returncode == 0, done.stderr
    assert "waiting for the model (" in done.stderr


def _read_until(fd: int, marker: bytes, seen: bytearray, *, within: float = 60) -> None:
    import os
    import select
    import time

    deadline = time.monotonic() + within
    while marker not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {marker!r} in the terminal: {bytes(seen)!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            seen += os.read(fd, 4096)


def test_repl_ctrl_c_at_the_prompt_exits_0_and_keeps_the_history(home: Path) -> None:
    """Issue #23 item 8: on a real terminal (a pty, so readline keeps history), Ctrl-C at
    `geode>` ends the REPL with exit 0 and the lines typed are in repl_history."""
    import os
    import pty

    script = write_script(home / "s.json", ["pong"])
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, "repl", "--cwd", str(home)], env=env_for(home, GEODE_SCRIPTED_MODEL=str(script)),
        stdin=slave, stdout=slave, stderr=subprocess.PIPE, cwd=str(home), close_fds=True,
    )
    os.close(slave)
    seen = bytearray()
    try:
        _read_until(master, b"geode> ", seen)
        os.write(master, b"ping the model\r")
        _read_until(master, b"pong", seen)
        del seen[:]
        _read_until(master, b"geode> ", seen)  # back at the prompt
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert b"Traceback" not in err
    assert "ping the model" in (home / "repl_history").read_text()


def test_repl_help_and_demo_model_cannot_switch(home: Path) -> None:
    done = geode(home, "repl", "--demo", "--cwd", str(home),
                 stdin="/help\n/model gpt-6-sol\n/status\n/exit\n")
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert "/new " in err and "/status " in err and "/model " in err  # /help lists them
    assert "demo (scripted) model, which cannot be switched" in err
    assert "model gpt-6-sol" not in err  # /status: still the demo model


def test_ask_and_repl_continue_this_workspaces_last_session(home: Path) -> None:
    script = write_script(home / "a.json", ["answered"])
    serve = start_serve(home, script=script)
    try:
        first = json.loads(geode(home, "ask", "--json", "first").stdout)["session_id"]
        again = geode(home, "ask", "--json", "-c", "second")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["session_id"] == first
        listed = json.loads(geode(home, "sessions", "list", "--json").stdout)
        mine = next(r for r in listed if r["id"] == first)
        assert (mine["title"], mine["source"]) == ("first", "cli")
    finally:
        assert serve.stop() == 0, serve.output()
    done = geode(home, "repl", "-c", "--cwd", str(home), stdin="/status\n/exit\n",
                 GEODE_SCRIPTED_MODEL=str(script))
    assert done.returncode == 0, done.stderr
    assert f"geode repl: session {first}," in done.stderr
    assert "messages 4" in done.stderr  # both turns' messages are there
