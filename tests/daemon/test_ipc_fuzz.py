"""Bad input on the IPC socket: malformed or oversized frames get one protocol error frame,
the connection closes, and the daemon keeps serving (hypothesis fuzz)."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geode.daemon import MAX_FRAME, Daemon, scripted_factory
from geode.settings import load_settings
from tests.daemon.conftest import free_port, write_script


class _Background:
    """A daemon on its own event loop in a thread, so sync hypothesis tests can poke it."""

    def __init__(self, home: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        settings_, secrets = load_settings(env={"GEODE_HOME": str(home),
                                                "GEODE_HEALTH_PORT": str(free_port())})
        factory = scripted_factory(write_script(home / "s.json", ["fine"]))
        self.daemon = Daemon(settings=settings_, secrets=secrets, provider_factory=factory)
        self.call(self.daemon.start())

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        self.call(self.daemon.shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def bg() -> Iterator[_Background]:
    home = Path(tempfile.mkdtemp(prefix="gdf-", dir="/tmp"))
    b = _Background(home)
    try:
        yield b
    finally:
        b.close()
        shutil.rmtree(home, ignore_errors=True)


def _connect(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(path))
    return s


def _read_all(s: socket.socket) -> list[dict[str, Any]]:
    """Every frame until the daemon closes the connection."""
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def _send(s: socket.socket, data: bytes) -> None:
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the daemon may close before reading everything: that is the behaviour


def _still_serving(path: Path) -> None:
    with _connect(path) as s:
        s.sendall(b'{"type":"ping"}\n')
        line = s.makefile("rb").readline()
    assert json.loads(line) == {"type": "pong"}


def _is_valid_frame(line: bytes) -> bool:
    try:
        frame = json.loads(line)
    except ValueError:
        return False
    return isinstance(frame, dict) and frame.get("type") in {"run", "approval", "cancel", "ping"}


_junk = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=200).map(str.encode),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
        | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                    max_size=4),
        max_leaves=10,
    ).map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"type": st.sampled_from(["run", "approval", "bogus", ""])},
                          optional={"id": st.integers() | st.text(max_size=5),
                                    "prompt": st.none() | st.integers() | st.just(""),
                                    "answer": st.text(max_size=6),
                                    "max_rounds": st.booleans() | st.integers(max_value=0)}
                          ).map(lambda v: json.dumps(v).encode()),
)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(payload=_junk)
def test_malformed_frames_get_a_protocol_error_and_a_closed_connection(
    bg: _Background, payload: bytes
) -> None:
    line = payload.replace(b"\n", b" ") + b"\n"
    if _is_valid_frame(line):
        frame = json.loads(line)
        # only well-formed runs are valid; an approval for an unknown id is ignored
        if frame["type"] in ("ping", "cancel") or (
            frame["type"] == "approval" and isinstance(frame.get("request_id"), str)
            and frame.get("answer") in ("allow", "deny", "always")
        ):
            return
        if frame["type"] == "run" and isinstance(frame.get("id"), str) and frame["id"] and \
                isinstance(frame.get("prompt"), str) and frame["prompt"].strip():
            return
    with _connect(bg.daemon.socket_path) as s:
        _send(s, line)
        frames = _read_all(s)  # returns only once the daemon closed the connection
    assert frames and frames[-1]["type"] == "error" and frames[-1]["code"] == "protocol"
    assert all(f["type"] != "result" for f in frames)
    _still_serving(bg.daemon.socket_path)


def test_an_oversized_frame_is_refused_and_the_daemon_is_unaffected(bg: _Background) -> None:
    with _connect(bg.daemon.socket_path) as s:
        big = json.dumps({"type": "run", "id": "x", "prompt": "a" * (MAX_FRAME + 10)})
        _send(s, big.encode() + b"\n")
        frames = _read_all(s)
    assert frames[-1]["code"] == "protocol" and "too large" in frames[-1]["message"]
    # a run just under the limit still works, on a new connection
    with _connect(bg.daemon.socket_path) as s:
        s.sendall(json.dumps({"type": "run", "id": "ok", "prompt": "hi"}).encode() + b"\n")
        reader = s.makefile("rb")
        while True:
            frame = json.loads(reader.readline())
            if frame["type"] in ("result", "error"):
                break
    assert frame["type"] == "result" and frame["text"] == "fine"
    assert bg.daemon.metrics.ipc_errors._value.get() >= 1
