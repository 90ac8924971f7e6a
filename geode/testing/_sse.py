"""Shared machinery of the wire-level fake model servers (aiohttp on 127.0.0.1).

A fake holds a script of replies, consumed one per generation request, and records every
request it receives. Vendor subclasses only render replies in their wire format.
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import contextlib
import json
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from geode.messages import Usage

__all__ = [
    "DropReply",
    "ErrorReply",
    "FakeModelServer",
    "MalformedReply",
    "RawSSEReply",
    "RecordedRequest",
    "Reply",
    "SSEEvent",
    "TextReply",
    "ToolCallsReply",
    "UsageLike",
    "split_text",
]

UsageLike = Usage | tuple[int, int] | None
#: body of a malformed 200 answer: starts like JSON, never ends
MALFORMED_BODY = '{"id": "broken", "content": [{"type": "te'


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake received: method, path, lower-cased headers, parsed JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class TextReply:
    text: str
    usage: Usage
    stop_reason: str | None = None  # vendor-native value; None = the vendor's normal end
    delay: float = 0.0


@dataclass(frozen=True)
class ToolCallsReply:
    calls: tuple[tuple[str, dict[str, Any], str], ...]  # (name, input, id)
    text: str
    usage: Usage


@dataclass(frozen=True)
class ErrorReply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DropReply:
    mid_stream: bool = False


@dataclass(frozen=True)
class MalformedReply:
    pass


@dataclass(frozen=True)
class SSEEvent:
    data: str
    event: str | None = None

    def encode(self) -> bytes:
        head = f"event: {self.event}\n" if self.event else ""
        return f"{head}data: {self.data}\n\n".encode()


@dataclass(frozen=True)
class RawSSEReply:
    """A streamed answer of exactly these events (then the end, or a cut connection)."""

    events: tuple[SSEEvent, ...]
    drop: bool = False


Reply = TextReply | ToolCallsReply | ErrorReply | DropReply | MalformedReply | RawSSEReply


def split_text(text: str) -> list[str]:
    """Word-sized stream deltas (whitespace kept), so a stream has several text deltas."""
    return re.findall(r"\S+\s*|\s+", text) or [""]


def _usage(usage: UsageLike, text: str) -> Usage:
    if usage is None:
        return Usage(input_tokens=12, output_tokens=max(1, len(text) // 4))
    if isinstance(usage, tuple):
        return Usage(input_tokens=usage[0], output_tokens=usage[1])
    return usage


class FakeModelServer(abc.ABC):
    """Base of :class:`FakeAnthropicServer` and :class:`FakeOpenAIServer`.

    Args:
        host: bind address; loopback by default so tests never leave the machine.
        port: 0 picks a free port.
        default_text: answer this when the script is empty (demo mode) instead of a 500.
        models: ids listed by ``GET /v1/models``.
    """

    #: path of the generation endpoint, e.g. ``/v1/messages``
    generate_path: str
    #: prefix of generated tool-call ids
    tool_id_prefix: str
    #: SSE ``event:`` name of the broken event sent by ``enqueue_malformed`` when streaming
    malformed_event: str | None = None

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        default_text: str | None = None,
        models: Sequence[str] = ("fake-model",),
    ) -> None:
        self.host = host
        self.port = port
        self.default_text = default_text
        self.models = list(models)
        self.requests: list[RecordedRequest] = []
        self._peers: dict[tuple[str, int], None] = {}
        self._script: deque[Reply] = deque()
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self._ids = 0

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> Self:
        if self._runner is not None:
            return self
        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_post(self.generate_path, self._handle_generate)
        app.router.add_get("/v1/models", self._handle_models)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            self._stopping.set()  # wakes delayed replies, so shutdown never waits them out
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def root_url(self) -> str:
        if self._runner is None:
            raise RuntimeError("fake server not started: use `async with` or `await srv.start()`")
        return f"http://{self.host}:{self.port}"

    @property
    @abc.abstractmethod
    def base_url(self) -> str:
        """What to pass to the vendor SDK as ``base_url``."""

    # --- script ------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Scripted replies not yet consumed."""
        return len(self._script)

    def clear_script(self) -> None:
        """Drop the scripted replies not yet consumed."""
        self._script.clear()

    @property
    def connections(self) -> list[tuple[str, int]]:
        """Client (host, port) of each TCP connection that sent a request, in first-use order."""
        return list(self._peers)

    @property
    def generate_requests(self) -> list[RecordedRequest]:
        """Recorded requests to the generation endpoint only."""
        return [r for r in self.requests if r.path == self.generate_path]

    def enqueue_text(
        self,
        text: str,
        *,
        usage: UsageLike = None,
        stop_reason: str | None = None,
        delay: float = 0.0,
    ) -> None:
        """Answer one request with ``text``.

        Args:
            usage: ``Usage`` or ``(input_tokens, output_tokens)``; default derived from text.
            stop_reason: vendor-native stop value (``max_tokens`` / ``length``, ...).
            delay: seconds to wait before answering (for client timeout tests).
        """
        self._script.append(TextReply(text, _usage(usage, text), stop_reason, delay))

    def enqueue_tool_calls(
        self,
        calls: Sequence[tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str]],
        *,
        text: str = "",
        usage: UsageLike = None,
    ) -> None:
        """Answer one request with tool calls (all in one response, i.e. parallel)."""
        full: list[tuple[str, dict[str, Any], str]] = []
        for call in calls:
            if len(call) == 3:
                full.append(call)
            else:
                self._ids += 1
                full.append((call[0], call[1], f"{self.tool_id_prefix}{self._ids:04d}"))
        self._script.append(ToolCallsReply(tuple(full), text, _usage(usage, text or "tool")))

    def enqueue_error(
        self,
        status: int,
        body: Any = None,
        headers: dict[str, str] | None = None,
        *,
        message: str | None = None,
    ) -> None:
        """Answer one request with HTTP ``status`` and the vendor's error body shape.

        ``body`` replaces the whole body; ``message`` only the human message in it.
        """
        if body is None:
            body = self.error_body(status, message or f"fake error {status}")
        self._script.append(ErrorReply(status, body, dict(headers or {})))

    def enqueue_raw(
        self, body: Any, *, status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        """Answer one request with exactly ``body`` as JSON (for odd vendor answers)."""
        self._script.append(ErrorReply(status, body, dict(headers or {})))

    def enqueue_drop(self, *, mid_stream: bool = False) -> None:
        """Close the connection without a response (or, streaming, after a few events)."""
        self._script.append(DropReply(mid_stream))

    def enqueue_sse(self, events: Sequence[SSEEvent], *, drop: bool = False) -> None:
        """Answer one streamed request with exactly ``events`` (the vendor's own shapes, odd
        ones, an error event mid-stream); ``drop``: cut the connection after them."""
        self._script.append(RawSSEReply(tuple(events), drop))

    def enqueue_malformed(self) -> None:
        """Answer 200 with a body that is not valid JSON (a broken SSE event if streaming)."""
        self._script.append(MalformedReply())

    # --- vendor rendering --------------------------------------------------------------------

    @abc.abstractmethod
    def error_body(self, status: int, message: str) -> dict[str, Any]:
        """The vendor's JSON error body."""

    @abc.abstractmethod
    def render_json(self, reply: TextReply | ToolCallsReply, body: Any) -> dict[str, Any]:
        """The vendor's non-streaming response."""

    @abc.abstractmethod
    def render_sse(self, reply: TextReply | ToolCallsReply, body: Any) -> list[SSEEvent]:
        """The vendor's SSE events for a streaming response."""

    @abc.abstractmethod
    def models_body(self) -> dict[str, Any]:
        """The vendor's ``GET /v1/models`` answer."""

    def next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids:04d}"

    # --- handlers ----------------------------------------------------------------------------

    async def _record(self, request: web.Request) -> Any:
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.lower(): v for k, v in request.headers.items()}
        transport = request.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        if peer is not None:
            # A client's source port names its connection: a pooled connection keeps it.
            self._peers.setdefault((str(peer[0]), int(peer[1])), None)
        self.requests.append(RecordedRequest(request.method, request.path, headers, body))
        return body

    async def _handle_models(self, request: web.Request) -> web.StreamResponse:
        await self._record(request)
        return web.json_response(self.models_body())

    async def _handle_generate(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        stream = isinstance(body, dict) and body.get("stream") is True
        if self._script:
            reply = self._script.popleft()
        elif self.default_text is not None:
            reply = TextReply(self.default_text, _usage(None, self.default_text))
        else:
            message = (
                f"fake server: script is empty (request {len(self.requests)}); "
                "enqueue a reply (srv.enqueue_text(...)) before calling the model"
            )
            return web.json_response(self.error_body(500, message), status=500)
        match reply:
            case ErrorReply(status=status, body=err_body, headers=headers):
                return web.json_response(err_body, status=status, headers=headers)
            case DropReply(mid_stream=True) if stream:
                partial = TextReply("this answer is cut off midway", _usage(None, "cut"))
                events = self.render_sse(partial, body)
                return await self._write_sse(request, events[: len(events) // 2], drop=True)
            case DropReply():
                return self._drop(request)
            case RawSSEReply(events=events, drop=drop):
                return await self._write_sse(request, list(events), drop=drop)
            case MalformedReply():
                if stream:
                    return await self._write_sse(
                        request, [SSEEvent(MALFORMED_BODY, self.malformed_event)], drop=False
                    )
                return web.Response(
                    status=200, text=MALFORMED_BODY, content_type="application/json"
                )
            case TextReply(delay=delay) if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)
        assert isinstance(reply, TextReply | ToolCallsReply)
        if stream:
            return await self._write_sse(request, self.render_sse(reply, body), drop=False)
        return web.json_response(self.render_json(reply, body))

    @staticmethod
    def _drop(request: web.Request) -> web.StreamResponse:
        transport = request.transport
        if transport is not None:
            transport.abort()  # no status line, no body: the client sees a dropped connection
        return web.Response(status=500)  # never reaches the client

    @staticmethod
    async def _write_sse(
        request: web.Request, events: list[SSEEvent], *, drop: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for event in events:
            await response.write(event.encode())
        if drop:
            transport = request.transport
            if transport is not None:
                transport.abort()
            return response
        await response.write_eof()
        return response


def serve_main(server_cls: type[FakeModelServer], *, argv: Sequence[str] | None = None) -> None:
    """``python -m geode.testing.fake_X --port N``: answer every request with a fixed text."""
    parser = argparse.ArgumentParser(description=f"Run {server_cls.__name__} for a local demo.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8900)
    parser.add_argument("--text", default="Hello from the GEODE fake model server.")
    args = parser.parse_args(argv)

    async def run() -> None:
        server = server_cls(host=args.host, port=args.port, default_text=args.text)
        async with server:
            print(f"{server_cls.__name__} listening; base_url = {server.base_url}", flush=True)
            await asyncio.Event().wait()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
