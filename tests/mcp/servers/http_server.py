"""A real streamable-HTTP MCP server, written with the official SDK, for the MCP client tests.

Listens on ``127.0.0.1:--port`` at ``/mcp``. Every tool call is appended as one JSON line to
``$WEB_LOG`` (tool, args, pid) before the tool acts, so tests can assert exactly what the server
received — and that it received nothing when a call was denied. Each start is appended to
``$WEB_STARTS``. ``crash_*`` tools kill the process mid-call, before any answer is sent.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations


def _record(tool: str, **args: object) -> None:
    log = os.environ.get("WEB_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"tool": tool, "args": args, "pid": os.getpid()}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def build() -> MCPServer:
    server = MCPServer("web", log_level="WARNING")

    @server.tool()
    def shout(text: str, times: int = 1) -> str:
        """Upper-case the text, repeated (no annotations)."""
        _record("shout", text=text, times=times)
        return " ".join([text.upper()] * times)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookup(key: str) -> str:
        """Read a value (annotated read-only)."""
        _record("lookup", key=key)
        return f"value of {key}"

    @server.tool()
    def note(text: str) -> str:
        """Record a note (no annotations: not idempotent)."""
        _record("note", text=text)
        return f"noted {text}"

    @server.tool()
    def charge(invoice: str) -> str:
        """Record the call, then die before answering (not idempotent)."""
        _record("charge", invoice=invoice)
        os._exit(3)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    def fetch(key: str) -> str:
        """Record; die before answering while $WEB_CRASH_ONCE exists (removed first)."""
        _record("fetch", key=key)
        marker = os.environ.get("WEB_CRASH_ONCE")
        if marker and Path(marker).exists():
            Path(marker).unlink()
            os._exit(4)
        return f"fetched {key}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    starts = os.environ.get("WEB_STARTS")
    if starts:
        with open(starts, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()}\n")
    server = build()
    server.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
