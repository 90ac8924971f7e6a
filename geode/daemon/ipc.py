"""The IPC socket of ``geode serve``: line-delimited JSON over ``$GEODE_HOME/cli.sock``.

Transport: a Unix stream socket, mode 0600 (only the daemon's user may connect). Each
frame is one JSON object on one line (UTF-8, ``\\n``-terminated). Frames from the client
may be at most :data:`MAX_FRAME` bytes (1 MiB); a longer line, invalid JSON, a
non-object, an unknown ``type`` or a badly typed field gets one ``error`` frame
(``code: "protocol"``) and the connection is closed. The daemon is unaffected.

Client → daemon::

    {"type": "run", "id": "r1", "prompt": "...",          # id: chosen by the client
     "session_id"?: "s-...", "model"?: "ID", "allow_tools"?: [..], "deny_tools"?: [..],
     "max_rounds"?: N, "time_budget_s"?: S, "cwd"?: "/abs/dir", "stream"?: bool}
    {"type": "approval", "request_id": "...", "answer": "allow" | "deny" | "always"}
    {"type": "cancel", "id": "r1"}                         # stop the running turn
    {"type": "ping"}                                      # → {"type": "pong"}

Daemon → client (every frame of a run carries the run's ``id``)::

    {"type": "event", "id", "seq": n, "kind": "turn_started" | "text_delta" |
     "assistant_text" | "tool_call" | "tool_result" | ... | "turn_finished", "data": {...}}
    {"type": "approval_request", "id", "request_id", "tool", "input", "reason", "safety",
     "always_allowed", "summary"}                        # summary: diff / command, plain text
    {"type": "result", "id", ...TurnResult.to_json()}      # last frame of a run
    {"type": "error", "id"?, "code", "message"}            # instead of a result

Error codes: ``protocol`` (bad frame; the connection closes), ``busy`` (the lanes stayed
full for the wait bound), ``config`` (e.g. unknown session id), ``store``, ``shutdown``
(the daemon is stopping), ``internal``.

One run at a time per connection; the connection stays open for further runs. Events of
one run arrive in the order the loop emitted them (``seq`` counts up from 1).

Lifetime: a run belongs to the daemon, not to the connection. A client that disconnects
mid-turn does not stop the turn: it finishes and is checkpointed; its events are dropped,
and any approval pending for it (or asked later) is a denial. Approvals not answered
within ``approval_timeout_s`` (default 120 s) are denials too (fail closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import structlog

from geode.errors import ConfigError, GeodeError, LaneBusy, ShuttingDown, StoreError

if TYPE_CHECKING:  # kept out of the import path of `geode ask` (cold start)
    from geode.executor.decisions import ApprovalRequest
    from geode.loop import LoopEvent

__all__ = [
    "MAX_FRAME",
    "MAX_SOCKET_PATH",
    "Connection",
    "DaemonNotRunning",
    "HomeLock",
    "IPCClient",
    "IPCServer",
    "ProtocolError",
    "RunHandler",
    "RunRequest",
    "ShuttingDown",
    "check_socket_path",
    "decode_frame",
    "encode_frame",
]

log = structlog.get_logger(__name__)

MAX_FRAME = 1 << 20  # client → daemon
CLIENT_READ_LIMIT = 64 << 20  # daemon → client: results may carry long answers
#: sun_path is 108 bytes on Linux including the terminating NUL
MAX_SOCKET_PATH = 107

Answer = Literal["allow", "deny", "always"]
_ANSWERS: frozenset[str] = frozenset({"allow", "deny", "always"})


class ProtocolError(Exception):
    """A frame that breaks the protocol; the connection is closed after an error frame."""


class DaemonNotRunning(ConfigError):
    def __init__(self, path: Path) -> None:
        super().__init__(f"no daemon at {path}; start one with `geode serve`")
        self.path = path


def encode_frame(frame: dict[str, Any]) -> bytes:
    return (json.dumps(frame, ensure_ascii=False, separators=(",", ":"), default=str)
            + "\n").encode()


def decode_frame(line: bytes) -> dict[str, Any]:
    try:
        frame = json.loads(line)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"frame is not valid JSON: {str(exc)[:120]}") from None
    if not isinstance(frame, dict):
        raise ProtocolError("frame must be a JSON object")
    if not isinstance(frame.get("type"), str):
        raise ProtocolError('frame needs a string "type"')
    return frame


def _opt(frame: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = frame.get(key)
    if value is None:
        return None
    # bool is an int in Python; JSON true is not a round count
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ProtocolError(f'field "{key}" has the wrong type')
    return value


def _str_list(frame: dict[str, Any], key: str) -> tuple[str, ...]:
    value = frame.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProtocolError(f'field "{key}" must be a list of strings')
    return tuple(value)


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    """A validated ``run`` frame."""

    id: str
    prompt: str
    session_id: str | None = None
    model: str | None = None
    allow_tools: tuple[str, ...] = ()
    deny_tools: tuple[str, ...] = ()
    max_rounds: int | None = None
    time_budget_s: float | None = None
    cwd: str | None = None
    stream: bool = False

    @classmethod
    def from_frame(cls, frame: dict[str, Any]) -> RunRequest:
        rid = frame.get("id")
        prompt = frame.get("prompt")
        if not isinstance(rid, str) or not rid or len(rid) > 200:
            raise ProtocolError('"run" needs a string "id" (1-200 chars)')
        if not isinstance(prompt, str) or not prompt.strip():
            raise ProtocolError('"run" needs a non-empty string "prompt"')
        max_rounds = _opt(frame, "max_rounds", int)
        budget = _opt(frame, "time_budget_s", (int, float))
        if max_rounds is not None and max_rounds < 1:
            raise ProtocolError('"max_rounds" must be at least 1')
        if budget is not None and budget <= 0:
            raise ProtocolError('"time_budget_s" must be positive')
        cwd = _opt(frame, "cwd", str)
        if cwd is not None and not os.path.isabs(cwd):
            raise ProtocolError('"cwd" must be an absolute path')
        return cls(
            id=rid, prompt=prompt, session_id=_opt(frame, "session_id", str),
            model=_opt(frame, "model", str), allow_tools=_str_list(frame, "allow_tools"),
            deny_tools=_str_list(frame, "deny_tools"), max_rounds=max_rounds,
            time_budget_s=None if budget is None else float(budget), cwd=cwd,
            stream=bool(_opt(frame, "stream", bool)),
        )


class Connection:
    """One client connection: ordered frame writes, approvals, and knowing the peer left."""

    def __init__(self, *, writer: asyncio.StreamWriter, approval_timeout_s: float) -> None:
        self._writer = writer
        self._lock = asyncio.Lock()
        self.approval_timeout_s = approval_timeout_s
        self.gone = False
        self._pending: dict[str, asyncio.Future[str]] = {}
        self._seq = 0
        self.run_task: asyncio.Task[None] | None = None
        self.run_id: str | None = None
        self.cancel_run: Callable[[], bool] | None = None

    async def send(self, frame: dict[str, Any]) -> bool:
        """Write one frame; False (never an exception) if the client is gone."""
        if self.gone or self._writer.is_closing():
            self.gone = True
            return False
        data = encode_frame(frame)
        async with self._lock:
            try:
                self._writer.write(data)
                await self._writer.drain()
            except (ConnectionError, OSError, RuntimeError):
                self.mark_gone()
                return False
        return True

    def mark_gone(self) -> None:
        """The client left: every pending approval becomes a denial."""
        self.gone = True
        for fut in self._pending.values():
            if not fut.done():
                fut.set_result("deny")

    def event_sink(self, run_id: str) -> Callable[[LoopEvent], Awaitable[None]]:
        async def sink(ev: LoopEvent) -> None:
            self._seq += 1
            await self.send({"type": "event", "id": run_id, "seq": self._seq, "kind": ev.kind,
                             "data": ev.data})

        return sink

    def approver(self, run_id: str) -> _ConnectionApprover:
        return _ConnectionApprover(conn=self, run_id=run_id)

    async def ask(self, run_id: str, request: ApprovalRequest) -> Answer:
        """Relay one approval request to the client; anything but an answer is a denial."""
        if self.gone:
            return "deny"  # nobody to ask: fail closed
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._pending[request.call_id] = fut
        try:
            sent = await self.send({
                "type": "approval_request", "id": run_id, "request_id": request.call_id,
                "tool": request.tool, "input": dict(request.args), "reason": request.reason,
                "safety": request.safety, "always_allowed": request.always_allowed,
                "summary": request.summary,
            })
            if not sent:
                return "deny"
            try:
                async with asyncio.timeout(self.approval_timeout_s):
                    answer = await fut
            except TimeoutError:
                log.info("ipc.approval_timeout", tool=request.tool)
                return "deny"
        finally:
            self._pending.pop(request.call_id, None)
        if answer == "always":
            # "always" is not offered for sensitive tools: then it allows this call only
            return "always" if request.always_allowed else "allow"
        return "allow" if answer == "allow" else "deny"

    def answer(self, request_id: str, answer: str) -> None:
        fut = self._pending.get(request_id)
        if fut is not None and not fut.done():
            fut.set_result(answer)

    async def close(self) -> None:
        self.mark_gone()
        with contextlib.suppress(Exception):
            self._writer.close()
            await self._writer.wait_closed()


class _ConnectionApprover:
    """The executor's ``Approver`` for one run on one connection."""

    def __init__(self, *, conn: Connection, run_id: str) -> None:
        self._conn = conn
        self._run_id = run_id

    async def __call__(self, request: ApprovalRequest) -> Answer:
        return await self._conn.ask(self._run_id, request)


#: runs one request for a connection; returns ``TurnResult.to_json()``
RunHandler = Callable[[RunRequest, Connection], Awaitable[dict[str, Any]]]


def check_socket_path(path: Path) -> None:
    """ConfigError unless a Unix socket can be created at ``path``."""
    size = len(os.fsencode(str(path)))
    if size > MAX_SOCKET_PATH:
        raise ConfigError(
            f"the IPC socket path {path} is {size} bytes; Unix sockets allow at most "
            f"{MAX_SOCKET_PATH}. Set GEODE_HOME to a shorter directory."
        )
    parent = path.parent
    try:
        parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create {parent} for the IPC socket ({exc.strerror}). Set GEODE_HOME to "
            "a directory you can write."
        ) from exc
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{parent} is not writable, so the IPC socket {path.name} cannot be created there. "
            "Fix its permissions or set GEODE_HOME to a directory you can write."
        )


class HomeLock:
    """One daemon per ``$GEODE_HOME``: an exclusive ``flock`` on ``serve.lock`` holding the pid.

    The kernel drops the lock when the process dies (even by SIGKILL), so a socket file
    found while we hold the lock is stale and is removed.
    """

    def __init__(self, *, home: Path, socket_path: Path) -> None:
        self.path = home / "serve.lock"
        self.socket_path = socket_path
        self._fd: int | None = None

    def acquire(self) -> None:
        check_socket_path(self.socket_path)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ConfigError(
                f"another `geode serve` (pid {pid}) is already running on {self.path.parent}; "
                "stop it first, or use another GEODE_HOME"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        if self.socket_path.exists() or self.socket_path.is_symlink():
            log.info("ipc.stale_socket_removed", path=str(self.socket_path))
            self.socket_path.unlink()

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


@dataclass(kw_only=True)
class _Counters:
    protocol_errors: int = 0
    connections: int = 0


class IPCServer:
    """Serves the protocol above; the daemon supplies ``handler`` (one run → result)."""

    def __init__(
        self,
        *,
        path: Path,
        handler: RunHandler,
        approval_timeout_s: float = 120.0,
        max_frame: int = MAX_FRAME,
        on_protocol_error: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self.handler = handler
        self.approval_timeout_s = approval_timeout_s
        self.max_frame = max_frame
        self.on_protocol_error = on_protocol_error
        self.counters = _Counters()
        self.runs: set[asyncio.Task[None]] = set()
        self._pongs: set[asyncio.Task[bool]] = set()
        self._conns: set[Connection] = set()
        self._server: asyncio.Server | None = None
        self.accepting = False

    async def start(self) -> None:
        """Bind the socket with mode 0600 (the caller holds the :class:`HomeLock`)."""
        # umask while binding: the socket file is born 0600, with no window in which
        # another user could connect before a chmod.
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(
                self._serve, path=str(self.path), limit=self.max_frame
            )
        except OSError as exc:
            raise ConfigError(
                f"cannot create the IPC socket {self.path}: {exc.strerror or exc}"
            ) from exc
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self.accepting = True

    async def stop_accepting(self) -> None:
        """No new connections or runs; runs in flight continue."""
        self.accepting = False
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        await self.stop_accepting()
        for conn in list(self._conns):
            await conn.close()
        self._server = None

    async def wait_runs(self, timeout_s: float) -> bool:
        """Wait for runs in flight; False if some were still running at the bound."""
        if not self.runs:
            return True
        _done, pending = await asyncio.wait(set(self.runs), timeout=timeout_s)
        return not pending

    def cancel_runs(self) -> None:
        for conn in self._conns:
            if conn.cancel_run is not None:
                conn.cancel_run()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(writer=writer, approval_timeout_s=self.approval_timeout_s)
        self._conns.add(conn)
        self.counters.connections += 1
        try:
            await self._read_loop(reader, conn)
        except ProtocolError as exc:
            self.counters.protocol_errors += 1
            if self.on_protocol_error is not None:
                self.on_protocol_error()
            log.info("ipc.protocol_error", error=str(exc))
            await conn.send({"type": "error", "code": "protocol", "message": str(exc)})
        except (ConnectionError, OSError):
            pass
        finally:
            self._conns.discard(conn)
            # The run (if any) goes on without the client; see the module docstring.
            await conn.close()

    async def _read_loop(self, reader: asyncio.StreamReader, conn: Connection) -> None:
        while True:
            try:
                line = await reader.readline()
            except ValueError:  # LimitOverrunError surfaces as ValueError from readline
                raise ProtocolError(
                    f"frame too large: the limit is {self.max_frame} bytes per line"
                ) from None
            if not line:
                return
            if not line.endswith(b"\n"):
                raise ProtocolError("connection closed in the middle of a frame")
            frame = decode_frame(line)
            self._dispatch(frame, conn)

    def _dispatch(self, frame: dict[str, Any], conn: Connection) -> None:
        kind = frame["type"]
        if kind == "run":
            req = RunRequest.from_frame(frame)
            if conn.run_task is not None and not conn.run_task.done():
                raise ProtocolError("one run at a time per connection")
            task = asyncio.create_task(self._run(req, conn), name=f"geode-ipc-{req.id}")
            conn.run_task = task
            conn.run_id = req.id
            self.runs.add(task)
            task.add_done_callback(self.runs.discard)
        elif kind == "approval":
            rid, answer = frame.get("request_id"), frame.get("answer")
            if not isinstance(rid, str) or answer not in _ANSWERS:
                raise ProtocolError('"approval" needs "request_id" and "answer": allow|deny|always')
            conn.answer(rid, str(answer))
        elif kind == "cancel":
            if conn.cancel_run is not None and frame.get("id") in (None, conn.run_id):
                conn.cancel_run()
        elif kind == "ping":
            pong = asyncio.get_running_loop().create_task(conn.send({"type": "pong"}))
            self._pongs.add(pong)  # keep a reference until it ran
            pong.add_done_callback(self._pongs.discard)
        else:
            raise ProtocolError(f"unknown frame type {str(kind)[:40]!r}")

    async def _run(self, req: RunRequest, conn: Connection) -> None:
        if not self.accepting:
            await conn.send({"type": "error", "id": req.id, "code": "shutdown",
                             "message": "the daemon is shutting down; try again later"})
            return
        try:
            result = await self.handler(req, conn)
        except LaneBusy as exc:
            await conn.send({"type": "error", "id": req.id, "code": "busy", "message": str(exc)})
            return
        except ShuttingDown as exc:
            await conn.send({"type": "error", "id": req.id, "code": "shutdown",
                             "message": str(exc)})
            return
        except asyncio.CancelledError:
            # the daemon stopped while this request still waited for a lane: say so
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await conn.send({"type": "error", "id": req.id, "code": "shutdown",
                                     "message": str(ShuttingDown())})
            raise
        except StoreError as exc:
            await conn.send({"type": "error", "id": req.id, "code": "store", "message": str(exc)})
            return
        except GeodeError as exc:
            code = "config" if isinstance(exc, ConfigError) else "internal"
            await conn.send({"type": "error", "id": req.id, "code": code, "message": str(exc)})
            return
        except Exception as exc:
            log.exception("ipc.run_failed", run_id=req.id)
            await conn.send({"type": "error", "id": req.id, "code": "internal",
                             "message": f"internal error: {type(exc).__name__}: {exc}"[:500]})
            return
        finally:
            conn.cancel_run = None
        await conn.send({"type": "result", "id": req.id, **result})


class IPCClient:
    """The thin client's side of the socket (``geode ask``, tests, the benchmark)."""

    def __init__(self, *, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def connect(cls, path: Path) -> IPCClient:
        try:
            reader, writer = await asyncio.open_unix_connection(
                str(path), limit=CLIENT_READ_LIMIT
            )
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise DaemonNotRunning(path) from exc
        return cls(reader=reader, writer=writer)

    async def send(self, frame: dict[str, Any]) -> None:
        self._writer.write(encode_frame(frame))
        await self._writer.drain()

    async def recv(self) -> dict[str, Any] | None:
        """The next frame, or None when the daemon closed the connection."""
        line = await self._reader.readline()
        if not line:
            return None
        return decode_frame(line)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()
            await self._writer.wait_closed()
