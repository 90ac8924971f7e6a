"""A real stdio MCP server, written with the official SDK, for the MCP tests.

Every tool call is appended as one JSON line to ``$ECHO_LOG`` so tests can assert exactly what
the server received (and that it received nothing when a call was denied). Each start is
appended to ``$ECHO_STARTS``.

``--mode`` makes it misbehave on purpose: ``exit`` (exits at once, after a stderr line),
``garbage`` (prints non-JSON on stdout), ``hang`` (never answers initialize).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

# 1x1 transparent PNG
_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000005000158f1d6bf0000000049454e44ae426082"
)


def _record(tool: str, **args: object) -> None:
    log = os.environ.get("ECHO_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"tool": tool, "args": args, "pid": os.getpid()}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def build() -> MCPServer:
    server = MCPServer("echo")

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back (no annotations)."""
        _record("echo", text=text)
        return f"echo: {text}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookup(key: str) -> str:
        """Read a value (annotated read-only)."""
        _record("lookup", key=key)
        return f"value of {key}"

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True))
    def put(key: str, value: str) -> str:
        """Store a value (annotated idempotent)."""
        _record("put", key=key, value=value)
        return f"stored {key}"

    @server.tool()
    def crash_write(note: str) -> str:
        """Record the call, then die before answering (not idempotent)."""
        _record("crash_write", note=note)
        os._exit(3)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def crash_read(key: str) -> str:
        """Record the call; die before answering while $ECHO_CRASH_ONCE exists (removed first)."""
        _record("crash_read", key=key)
        marker = os.environ.get("ECHO_CRASH_ONCE")
        if marker and Path(marker).exists():
            Path(marker).unlink()
            os._exit(4)
        if os.environ.get("ECHO_CRASH_ALWAYS"):
            os._exit(5)
        return f"read {key}"

    @server.tool()
    def fail(message: str) -> str:
        """Always fails with the message."""
        _record("fail", message=message)
        raise ToolError(message)

    @server.tool()
    def picture() -> Image:
        """Return a tiny PNG."""
        _record("picture")
        return Image(data=_PNG, format="png")

    @server.tool()
    def show_env(name: str) -> str:
        """Return an environment variable of the server process (or <unset>)."""
        _record("show_env", name=name)
        return os.environ.get(name, "<unset>")

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add a tool named `extra` and announce the new tool list."""
        _record("grow")

        def extra(x: int) -> str:
            """A tool added at run time."""
            return f"extra {x}"

        server.add_tool(extra)
        await ctx.session.send_tool_list_changed()
        return "grown"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="ok", choices=["ok", "exit", "garbage", "hang"])
    mode = parser.parse_args().mode
    starts = os.environ.get("ECHO_STARTS")
    if starts:
        with open(starts, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()}\n")
    token = os.environ.get("ECHO_TOKEN")
    if token:
        print(f"echo server starting with token {token}", file=sys.stderr, flush=True)
    if mode == "exit":
        print("fatal: missing configuration, giving up", file=sys.stderr, flush=True)
        sys.exit(2)
    if mode == "garbage":
        print("Hello! this is not JSON-RPC", flush=True)
    if mode in ("garbage", "hang"):
        # never answer initialize; leave when the client closes our stdin
        sys.stdin.read()
        return
    build().run("stdio")


if __name__ == "__main__":
    main()
