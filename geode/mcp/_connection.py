"""One MCP server as a supervised connection: start, initialize, list tools, restart on death.

Each connection is owned by one supervisor task: the SDK's transports and ``ClientSession``
are anyio context managers that must be entered and left by the same task, so every
(re)connect happens there; calls from sessions only borrow the live ``ClientSession``.

Between the transport and the session sits a small pump. It is how we notice a server
death without private SDK state (end of the transport stream) and how a server that prints
garbage on stdout during the handshake fails at once instead of at the initialize timeout.

A streamable-HTTP server has no process of ours to watch: its death shows up as a call's
response stream ending, a refused connection, or a 404 for our session id once it has
restarted. The first makes us reconnect; the last two also tell us the call never reached
the server (:class:`NotSent`), which a tracking HTTP transport records per call through a
context variable (the SDK runs each request's POST in the calling task's context).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anyio
import httpx2
import mcp_types as mt
import structlog
from anyio.streams.memory import MemoryObjectSendStream
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client._transport import ReadStream, TransportStreams
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import (  # the SDK's own client defaults
    MCP_DEFAULT_SSE_READ_TIMEOUT,
    MCP_DEFAULT_TIMEOUT,
)
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from geode import __version__
from geode.mcp.config import MissingVariable, ServerConfig, expand_vars
from geode.secret_redaction import redact_text

__all__ = [
    "CallTimedOut",
    "NotSent",
    "SecretSource",
    "ServerConnection",
    "ServerDied",
    "StartError",
]

log = structlog.get_logger(__name__)

State = Literal["idle", "starting", "ready", "restarting", "failed", "closed"]
_STDERR_TAIL = 20
#: a connection that stayed up this long resets the restart backoff
_STABLE_AFTER_S = 60.0


class SecretSource(Protocol):
    def get(self, name: str) -> str | None: ...


class StartError(Exception):
    """The server could not be started or did not complete the MCP handshake."""


class ServerDied(Exception):
    """The connection closed while a call was in flight."""


class CallTimedOut(Exception):
    """No answer within the call's deadline (the server may still be working)."""


class NotSent(Exception):
    """The call provably never reached the server (HTTP: connection refused, session gone).

    Attributes:
        unreachable: the server could not be connected to at all (as opposed to: it answered
            that it no longer knows our session, so a fresh session may take the call).
    """

    def __init__(self, message: str, *, unreachable: bool) -> None:
        super().__init__(message)
        self.unreachable = unreachable


@dataclass
class _Delivery:
    """What the HTTP layer saw of one call's POST; written by :class:`_TrackingTransport`."""

    connect_failed: str | None = None
    session_lost: bool = False


#: set by :meth:`ServerConnection.call` around one ``tools/call``; the SDK copies the caller's
#: context into the task that POSTs the request, so the transport sees this call's record.
_delivery: ContextVar[_Delivery | None] = ContextVar("geode_mcp_delivery", default=None)


class _TrackingTransport(httpx2.AsyncBaseTransport):
    """Records, for the call in whose context a request runs, whether it left this host."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        record = _delivery.get()
        try:
            response = await self._inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            # No connection was established, so no byte of the request was sent.
            if record is not None:
                record.connect_failed = _describe(exc)
            raise
        if (
            record is not None
            and response.status_code == 404
            and request.headers.get("mcp-session-id")
        ):
            # Streamable HTTP: 404 for a session id means the server no longer has the
            # session (restarted); it did not process the request.
            record.session_lost = True
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _http_client(headers: Mapping[str, str]) -> httpx2.AsyncClient:
    # The SDK's create_mcp_http_client defaults (timeouts), with the tracking transport.
    return httpx2.AsyncClient(
        headers=dict(headers),
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        transport=_TrackingTransport(httpx2.AsyncHTTPTransport()),
    )


def _find(exc: BaseException | None, kind: type[BaseException]) -> BaseException | None:
    if exc is None or isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (hit := _find(inner, kind)) is not None:
                return hit
    return _find(exc.__cause__, kind) if exc.__cause__ is not None else None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        # an unparsable stdout line: show the line itself, it says what went wrong
        bad = [e.get("input") for e in exc.errors() if isinstance(e.get("input"), str)]
        if bad:
            return f"first bad line: {bad[0][:160]!r}"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


class ServerConnection:
    """A supervised connection to one MCP server (stdio or streamable HTTP)."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        secrets: SecretSource | None,
        init_timeout_s: float,
        backoff_s: Sequence[float],
        on_change: Callable[[], None],
    ) -> None:
        self.config = config
        self.name = config.name
        self.state: State = "idle"
        self.error: str | None = None
        self.tools: tuple[mt.Tool, ...] = ()
        #: bumped on every successful (re)connect; a retry waits for a newer epoch
        self.epoch = 0
        self.restarts = 0
        #: connection attempts begun, and the number of the last one that failed
        self.attempts = 0
        self.last_failed_attempt = 0
        #: monotonic time after which a server that never started may be tried again
        self.retry_at = 0.0
        self._secrets = secrets
        self._init_timeout_s = config.startup_timeout_s or init_timeout_s
        self._backoff = tuple(backoff_s) or (1.0,)
        self._on_change = on_change
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._first_outcome: asyncio.Event | None = None
        self._cond: asyncio.Condition | None = None
        self._wake: asyncio.Event | None = None
        #: cuts a restart backoff short: closing, or a caller waiting for a reconnect
        self._nudge: asyncio.Event | None = None
        self._closing = False
        self._refresh = False
        self._ended = False
        self._garbage: str | None = None
        self._ever_ready = False
        self._stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL)
        self._secret_values: tuple[str, ...] = ()

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the supervisor if it is not running; wait for the first attempt's outcome."""
        if self._task is None or self._task.done():
            if self._closing:
                return
            self._first_outcome = asyncio.Event()
            self._cond = asyncio.Condition()
            self._wake = asyncio.Event()
            self._nudge = asyncio.Event()
            self._task = asyncio.create_task(self._supervise(), name=f"mcp-server:{self.name}")
        assert self._first_outcome is not None
        await self._first_outcome.wait()

    async def aclose(self) -> None:
        self._closing = True
        for event in (self._wake, self._nudge):
            if event is not None:
                event.set()
        task = self._task
        if task is not None and not task.done():
            try:
                # The supervisor leaves its contexts itself (stdin closed, then terminate);
                # bounded so a wedged server cannot hold up shutdown.
                await asyncio.wait_for(asyncio.shield(task), timeout=10.0)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self.state = "closed"

    async def _notify(self) -> None:
        assert self._cond is not None
        async with self._cond:
            self._cond.notify_all()

    async def wait_ready(
        self,
        *,
        newer_than: int = -1,
        wait_s: float,
        nudge: bool = False,
        until_attempt_fails: bool = False,
    ) -> bool:
        """Wait until the server is ready on an epoch above ``newer_than``.

        Args:
            nudge: wake the supervisor so that a reconnect is attempted now rather than after
                its backoff (HTTP: we did not start the server; it may well be up already).
            until_attempt_fails: also stop waiting when a reconnect attempt begun after this
                call fails (an HTTP server that is down need not hold a call for the whole
                wait). Implies ``nudge``.
        """
        if self._cond is None:
            return False

        def ok() -> bool:
            return self.state == "ready" and self.epoch > newer_than

        if ok():
            return True
        # Only an attempt begun after this point counts: one already under way may have
        # started before the server came back.
        begun_before = self.attempts
        if (nudge or until_attempt_fails) and self._nudge is not None:
            self._nudge.set()

        def done() -> bool:
            if until_attempt_fails and self.last_failed_attempt > begun_before:
                return True
            return ok() or self.state in ("failed", "closed")

        try:
            async with asyncio.timeout(max(wait_s, 0.0)), self._cond:
                await self._cond.wait_for(done)
        except TimeoutError:
            return False
        return ok()

    async def _supervise(self) -> None:
        failures = 0
        loop = asyncio.get_running_loop()
        assert self._first_outcome is not None
        while not self._closing:
            self.state = "restarting" if self._ever_ready else "starting"
            began = loop.time()
            assert self._nudge is not None
            # cleared before the attempt: a caller's nudge during a failing attempt must
            # still cut the following backoff short
            self._nudge.clear()
            self.attempts += 1
            attempt = self.attempts
            try:
                await self._run_once()
                self.error = None if self._closing else "the server's connection closed"
                if not self._closing:
                    log.warning(
                        "mcp server exited; restarting", server=self.name,
                        stderr=list(self._stderr_tail)[-5:],
                    )
            except StartError as exc:
                self.error = f"MCP server {self.name!r}: {exc}"
                log.error("mcp server failed to start", server=self.name, error=self.error)
                self.last_failed_attempt = attempt
                if not self._ever_ready:
                    self.state = "failed"
                    self._first_outcome.set()
                    await self._notify()
                    return
            finally:
                self._session = None
            if self._closing:
                break
            if loop.time() - began > _STABLE_AFTER_S:
                failures = 0
            delay = self._backoff[min(failures, len(self._backoff) - 1)]
            failures += 1
            self.restarts += 1
            self.state = "restarting"
            await self._notify()
            if not self._closing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._nudge.wait(), timeout=delay)
        self.state = "closed"
        self._first_outcome.set()
        await self._notify()

    # -- one connection ------------------------------------------------------------------

    def _expand(self, value: str) -> str:
        lookup = self._secrets.get if self._secrets is not None else (lambda _n: None)
        return expand_vars(value, lookup)

    async def _open_transport(
        self, stack: AsyncExitStack
    ) -> TransportStreams:
        cfg = self.config
        try:
            if cfg.transport == "stdio":
                assert cfg.command is not None
                env = {k: self._expand(v) for k, v in cfg.env.items()}
                args = [self._expand(a) for a in cfg.args]
                self._secret_values = tuple(v for v in env.values() if v)
                params = StdioServerParameters(
                    command=self._expand(cfg.command), args=args, env=env, cwd=cfg.cwd,
                )
                return await self._open_stdio(stack, params)
            assert cfg.url is not None
            headers = {k: self._expand(v) for k, v in cfg.headers.items()}
            self._secret_values = tuple(v for v in headers.values() if v)
            client = await stack.enter_async_context(_http_client(headers))
            streams = await stack.enter_async_context(
                streamable_http_client(self._expand(cfg.url), http_client=client)
            )
            return streams
        except MissingVariable as exc:
            raise StartError(
                f"${{{exc.name}}} is not set; export {exc.name}=... or add it to "
                "$GEODE_HOME/.env"
            ) from None

    async def _open_stdio(
        self, stack: AsyncExitStack, params: StdioServerParameters
    ) -> TransportStreams:
        # stderr goes to a pipe we read, so it lands in the log (redacted) instead of on
        # our own stderr, and its tail can explain a failed start.
        r_fd, w_fd = os.pipe()
        errlog = os.fdopen(w_fd, "w")
        reader: list[asyncio.Task[None]] = []

        async def stop_reader() -> None:
            # Runs after the transport's exit has stopped the process: give the reader a
            # moment to collect the last lines (they explain a failed start), then stop it.
            for task in reader:
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(task), timeout=1.0)
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

        # Registered before the transport, so it runs after the transport's exit.
        stack.push_async_callback(stop_reader)
        try:
            streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        except OSError as exc:
            os.close(r_fd)
            raise StartError(
                f"cannot run {params.command!r}: {exc.strerror or exc}"
                + (" (is it installed and executable?)" if exc.errno in (2, 13) else "")
            ) from None
        except BaseException:
            os.close(r_fd)
            raise
        finally:
            errlog.close()  # the child holds its own copy; EOF comes when it exits
        reader.append(
            asyncio.create_task(self._read_stderr(r_fd), name=f"mcp-stderr:{self.name}")
        )
        return streams

    async def _read_stderr(self, fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20)
        pipe = os.fdopen(fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            while True:
                try:
                    raw = await reader.readline()
                except ValueError:  # one line over the limit: take what is buffered
                    raw = await reader.read(1 << 20)
                if not raw:
                    return
                line = redact_text(
                    raw.decode("utf-8", "replace").rstrip(), extra=self._secret_values
                )
                if line:
                    self._stderr_tail.append(line)
                    log.info("mcp server stderr", server=self.name, line=line)
        finally:
            transport.close()

    async def _pump(
        self,
        source: ReadStream[SessionMessage | Exception],
        sink: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        try:
            async with sink:
                async for item in source:
                    if isinstance(item, Exception):
                        text = redact_text(_describe(item), extra=self._secret_values)[:300]
                        if self.state != "ready":
                            # Garbage during the handshake: fail now, not at the timeout.
                            self._garbage = text
                            return
                        log.warning("mcp server sent an invalid message", server=self.name,
                                    error=text)
                        continue
                    await sink.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass
        finally:
            self._ended = True
            if self._wake is not None:
                self._wake.set()

    async def _list_tools(self, session: ClientSession) -> tuple[mt.Tool, ...]:
        tools: list[mt.Tool] = []
        cursor: str | None = None
        for _ in range(100):  # bounded: a server looping on cursors cannot hang us
            params = mt.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tuple(tools)

    def _start_failure(self, exc: BaseException | None) -> StartError:
        unreachable = _find(exc, httpx2.TransportError)
        if self._garbage is not None:
            why = f"wrote output that is not MCP JSON-RPC on stdout ({self._garbage})"
        elif self.config.transport == "http" and unreachable is not None:
            why = f"cannot reach {self.config.url} ({_describe(unreachable)})"
        elif isinstance(exc, TimeoutError):
            why = f"did not complete initialize within {self._init_timeout_s:g} s"
        elif isinstance(exc, MCPError) and exc.code == mt.CONNECTION_CLOSED:
            why = (
                "exited before completing initialize"
                if self.config.transport == "stdio"
                else f"connection to {self.config.url} closed before initialize completed"
            )
        elif exc is not None:
            why = f"initialize failed: {_describe(exc)}"
        else:
            why = "initialize failed"
        return StartError(why)

    async def _run_once(self) -> None:
        """Connect, initialize, serve until the connection ends or we close."""
        self._ended = False
        self._garbage = None
        self._stderr_tail.clear()
        failure: BaseException | None = None
        started = False
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._open_transport(stack)
                inner_send, inner_recv = anyio.create_memory_object_stream[
                    SessionMessage | Exception
                ](0)
                stack.push_async_callback(inner_recv.aclose)
                tg = await stack.enter_async_context(anyio.create_task_group())
                tg.start_soon(self._pump, read, inner_send)
                stack.callback(tg.cancel_scope.cancel)
                session = await stack.enter_async_context(
                    ClientSession(
                        inner_recv, write, message_handler=self._on_message,
                        client_info=mt.Implementation(name="geode", version=__version__),
                    )
                )
                try:
                    with anyio.fail_after(self._init_timeout_s):
                        await session.initialize()
                        tools = await self._list_tools(session)
                except (TimeoutError, MCPError, RuntimeError, ValueError) as exc:
                    failure = exc
                else:
                    started = True
                    await self._serve(session, tools)
        except StartError:
            raise
        except Exception as exc:  # any transport fault is this server's failure
            if started:
                log.warning("mcp server connection failed", server=self.name,
                            error=_describe(exc))
                return
            failure = exc
        if not started:
            err = self._start_failure(failure)
            tail = [ln for ln in self._stderr_tail if ln][-5:]
            if tail:
                err = StartError(f"{err}; its stderr ends with: {' | '.join(tail)}")
            raise err

    async def _serve(self, session: ClientSession, tools: tuple[mt.Tool, ...]) -> None:
        assert self._first_outcome is not None and self._wake is not None
        self.tools = tools
        self._session = session
        self.epoch += 1
        self.state = "ready"
        self.error = None
        self._ever_ready = True
        log.info("mcp server ready", server=self.name, tools=len(tools), epoch=self.epoch)
        self._on_change()
        self._first_outcome.set()
        await self._notify()
        while not (self._closing or self._ended):
            await self._wake.wait()
            self._wake.clear()
            if self._refresh and not (self._closing or self._ended):
                self._refresh = False
                try:
                    with anyio.fail_after(self._init_timeout_s):
                        self.tools = await self._list_tools(session)
                except (TimeoutError, MCPError) as exc:
                    log.warning("mcp tool list refresh failed", server=self.name,
                                error=_describe(exc))
                else:
                    log.info("mcp tool list changed", server=self.name, tools=len(self.tools))
                    self._on_change()
        self._session = None
        self.state = "restarting" if not self._closing else "closed"
        await self._notify()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            # Refreshed by the supervisor task, not here: this handler runs on the
            # session's receive path and must not wait on a request of its own.
            self._refresh = True
            if self._wake is not None:
                self._wake.set()
        elif isinstance(message, Exception):
            log.warning("mcp transport error", server=self.name, error=_describe(message))

    # -- calls ---------------------------------------------------------------------------

    async def call(
        self, tool: str, args: Mapping[str, Any], *, budget_s: float
    ) -> mt.CallToolResult:
        """One ``tools/call``.

        Raises:
            ServerDied: the connection closed before the answer came.
            CallTimedOut: no answer within ``budget_s``.
            MCPError: the server answered with a JSON-RPC error.
        """
        session = self._session
        if session is None or self.state != "ready":
            raise ServerDied(self.error or "the server is not running")
        record = _Delivery()
        token = _delivery.set(record)
        try:
            return await session.call_tool(tool, dict(args), read_timeout_seconds=budget_s)
        except MCPError as exc:
            if record.connect_failed is not None:
                raise NotSent(
                    f"cannot reach {self.config.url} ({record.connect_failed})", unreachable=True
                ) from exc
            if record.session_lost:
                self._reconnect("the server no longer knows our session")
                raise NotSent(
                    "the server no longer knows our session (it restarted?)", unreachable=False
                ) from exc
            if exc.code == mt.CONNECTION_CLOSED:
                if self.config.transport == "http":
                    # The response stream ended without an answer: the server (or the path
                    # to it) went away. A fresh session is the only way to go on.
                    self._reconnect(exc.message)
                raise ServerDied(exc.message) from exc
            if exc.code == mt.REQUEST_TIMEOUT:
                raise CallTimedOut(exc.message) from exc
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise ServerDied(_describe(exc)) from exc
        finally:
            _delivery.reset(token)

    def _reconnect(self, why: str) -> None:
        """Make the supervisor drop this connection and open a new one (HTTP)."""
        if self.state == "ready" and not self._ended:
            log.warning("mcp server connection lost; reconnecting", server=self.name, why=why)
            self._ended = True
            self.state = "restarting"  # no new call may borrow the doomed session
            if self._wake is not None:
                self._wake.set()
