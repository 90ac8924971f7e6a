"""``geode mcp serve``: GEODE as an MCP server, over stdio or streamable HTTP on loopback.

Tools offered to the MCP host:

- ``run_agent(prompt, model?, session_id?, max_rounds?, time_budget_s?)`` — one HEADLESS
  turn, built here (not through the daemon's IPC / channel path) with the unattended default
  deny list: ``run_bash``, ``delegate_task`` and ``computer`` are denied, tools that need
  approval are denied (nobody is there to approve), and there is no computer-use exception.
  Returns ``{text, termination, session_id, turn_id, tool_calls, rounds, detail}``.
- ``list_sessions(limit)`` and ``session_timeline(session_id, limit)`` — read-only.

Testing aid: with ``GEODE_MCP_SCRIPT=/path/script.json`` every ``run_agent`` is answered by
the scripted model instead of a real provider. The file is a JSON list; a string is a text
answer, ``{"tool": NAME, "input": {...}}`` a tool call, and a list of those a parallel batch.
Meant for tests and offline demos, never for production.

stdout carries the protocol on stdio, so everything GEODE logs goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from geode.errors import ConfigError, GeodeError
from geode.secret_redaction import redact_text
from geode.settings import Secrets, Settings

__all__ = ["DENIED_TOOLS", "GeodeMCPApp", "build_server", "load_script", "main", "serve"]

log = structlog.get_logger(__name__)

#: denied on top of HEADLESS's own deny list (kept explicit: this entry point is built
#: separately and must not depend on another module's default staying the same)
DENIED_TOOLS: tuple[str, ...] = ("run_bash", "delegate_task", "computer")
SCRIPT_ENV = "GEODE_MCP_SCRIPT"
DEFAULT_HTTP_PORT = 8765


def load_script(path: Path) -> list[Any]:
    """Parse a scripted-model file (see the module docstring) into ScriptedProvider items."""
    from geode.providers.scripted import ToolCall

    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{SCRIPT_ENV}={path}: cannot read the script: {exc}") from exc
    if not isinstance(raw, list):
        raise ConfigError(f"{SCRIPT_ENV}={path}: expected a JSON list of responses.")

    def call(item: Any) -> ToolCall:
        if not isinstance(item, dict) or not isinstance(item.get("tool"), str):
            raise ConfigError(
                f'{SCRIPT_ENV}={path}: items are strings or {{"tool": NAME, "input": {{...}}}}, '
                f"got {item!r}"
            )
        return ToolCall(name=item["tool"], input=dict(item.get("input") or {}))

    items: list[Any] = []
    for item in raw:
        if isinstance(item, str):
            items.append(item)
        elif isinstance(item, list):
            items.append([call(i) for i in item])
        else:
            items.append(call(item))
    return items


class GeodeMCPApp:
    """The process-wide state behind the MCP tools: one Runtime, opened on first use."""

    def __init__(
        self,
        *,
        workspace: Path,
        script: Path | None = None,
        settings: Settings | None = None,
        secrets: Secrets | None = None,
    ) -> None:
        self.workspace = workspace.resolve()
        self.script = script
        self._settings = settings
        self._secrets = secrets
        self._runtime: Any | None = None
        self._lock = asyncio.Lock()
        self._session_locks: dict[str, asyncio.Lock] = {}

    async def runtime(self) -> Any:
        async with self._lock:
            if self._runtime is None:
                from geode.daemon.runtime import Runtime
                from geode.mcp.manager import MCPServerManager
                from geode.mcp.trust import project_mcp_section
                from geode.settings import load_settings

                if self._settings is None or self._secrets is None:
                    self._settings, self._secrets = load_settings(cwd=self.workspace)
                settings, secrets = self._settings, self._secrets
                mcp = None
                if settings.mcp or project_mcp_section(self.workspace) is not None:
                    mcp = MCPServerManager.from_settings(
                        settings, secrets, project_dir=self.workspace
                    )
                self._runtime = await Runtime.create(settings=settings, secrets=secrets, mcp=mcp)
            return self._runtime

    async def aclose(self) -> None:
        async with self._lock:
            if self._runtime is not None:
                await self._runtime.aclose()
                self._runtime = None

    async def run_agent(
        self,
        prompt: str,
        *,
        model: str | None = None,
        session_id: str | None = None,
        max_rounds: int | None = None,
        time_budget_s: float | None = None,
    ) -> dict[str, Any]:
        from geode.daemon.session import SessionContext

        if not prompt.strip():
            raise ConfigError("The prompt is empty.")
        provider = None
        if self.script is not None:
            from geode.providers.scripted import ScriptedProvider

            provider = ScriptedProvider(load_script(self.script))
        runtime = await self.runtime()
        ctx = SessionContext(
            mode="HEADLESS",
            source="mcp",
            workspace=self.workspace,
            session_id=session_id,
            model=model,
            deny_tools=DENIED_TOOLS,
            max_rounds=max_rounds,
            time_budget_s=time_budget_s,
            provider=provider,
        )
        # One turn at a time per session: a host calling twice on one session must not
        # interleave two turns on the same checkpoint chain.
        lock = self._session_locks.setdefault(session_id, asyncio.Lock()) if session_id else None
        if lock is not None:
            async with lock:
                result = await (await runtime.open_session(ctx)).run(prompt)
        else:
            result = await (await runtime.open_session(ctx)).run(prompt)
        # The host is an output path like `geode run`'s stdout: a credential GEODE loaded
        # reaches it masked, whatever the model repeated (docs/security, "Secrets").
        return {
            "text": redact_text(result.text),
            "termination": result.termination.value,
            "session_id": result.session_id,
            "turn_id": result.turn_id,
            "tool_calls": list(result.tool_calls),
            "rounds": result.rounds,
            "detail": redact_text(result.detail),
        }

    async def list_sessions(self, limit: int = 20) -> list[dict[str, Any]]:
        runtime = await self.runtime()
        if runtime.store is None:
            return []
        rows = await runtime.store.sessions.list(limit=max(1, min(limit, 200)))
        return [
            {
                "session_id": r.id, "title": r.title, "mode": r.mode, "model": r.model,
                "status": r.status, "created_at": r.created_at.isoformat(),
                "updated_at": r.updated_at.isoformat(), "messages": r.message_count,
            }
            for r in rows
        ]

    async def session_timeline(self, session_id: str, limit: int = 200) -> list[dict[str, Any]]:
        runtime = await self.runtime()
        if runtime.store is None:
            return []
        if not await runtime.store.sessions.exists(session_id):
            raise ConfigError(f"Session {session_id!r} does not exist (see list_sessions).")
        rows = await runtime.store.timeline.list(session_id, limit=max(1, min(limit, 2000)))
        return [
            {
                "kind": r.kind, "turn_id": r.turn_id, "correlation_id": r.correlation_id,
                "payload": r.payload,
                "created_at": r.created_at.isoformat() if r.created_at else None,
            }
            for r in rows
        ]


def build_server(app: GeodeMCPApp) -> MCPServer[Any]:
    """The MCP server object with GEODE's three tools bound to ``app``."""
    server: MCPServer[Any] = MCPServer(
        "geode",
        instructions=(
            "GEODE runs an agent turn with a host-held tool boundary. run_agent is unattended: "
            "shell, sub-agents, computer use and any tool needing approval are denied."
        ),
    )

    async def guarded(coro: Any) -> Any:
        try:
            return await coro
        except GeodeError as exc:
            # The host sees a tool error with our message (masked), not a traceback.
            raise ToolError(redact_text(str(exc))) from exc

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, open_world_hint=True))
    async def run_agent(
        prompt: str,
        model: str | None = None,
        session_id: str | None = None,
        max_rounds: int | None = None,
        time_budget_s: float | None = None,
    ) -> dict[str, Any]:
        """Run one unattended GEODE agent turn and return its answer.

        Returns text, termination reason, session_id (pass it back to continue the
        conversation), turn_id and a summary of tool calls with their status.
        """
        result: dict[str, Any] = await guarded(
            app.run_agent(prompt, model=model, session_id=session_id, max_rounds=max_rounds,
                          time_budget_s=time_budget_s)
        )
        return result

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    async def list_sessions(limit: int = 20) -> dict[str, Any]:
        """List the most recent GEODE sessions."""
        return {"sessions": await guarded(app.list_sessions(limit))}

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
    async def session_timeline(session_id: str, limit: int = 200) -> dict[str, Any]:
        """Read a session's timeline (turns and tool calls, denials included)."""
        return {"session_id": session_id,
                "entries": await guarded(app.session_timeline(session_id, limit))}

    return server


async def serve(
    *,
    workspace: Path,
    http: bool = False,
    port: int = DEFAULT_HTTP_PORT,
    script: Path | None = None,
    settings: Settings | None = None,
    secrets: Secrets | None = None,
) -> None:
    """Serve until the host disconnects (stdio) or the process is stopped (HTTP)."""
    app = GeodeMCPApp(workspace=workspace, script=script, settings=settings, secrets=secrets)
    server = build_server(app)
    try:
        if http:
            import uvicorn

            # Loopback only: run_agent acts on this machine, so it is never exposed to a
            # network; the SDK adds Host/Origin checks against DNS rebinding for 127.0.0.1.
            starlette_app = server.streamable_http_app(host="127.0.0.1")
            sock = _listen_loopback(port)
            bound = int(sock.getsockname()[1])
            config = uvicorn.Config(
                starlette_app, host="127.0.0.1", port=bound, log_level="warning",
                lifespan="on",
            )
            print(f"geode mcp serve: listening on http://127.0.0.1:{bound}/mcp "
                  "(streamable HTTP, loopback only)", file=sys.stderr, flush=True)
            await uvicorn.Server(config).serve(sockets=[sock])
        else:
            await server.run_stdio_async()
    finally:
        await app.aclose()


def _listen_loopback(port: int) -> socket.socket:
    """Bind 127.0.0.1:``port`` here, so a port in use is a ConfigError (exit 2, like
    ``geode serve``), not uvicorn's log line and exit 3."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen for MCP on 127.0.0.1:{port} ({exc.strerror or exc}). "
            "Pass --port with a free port."
        ) from exc
    sock.set_inheritable(True)
    return sock


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m geode.mcp.server [--http] [--port N] [--cwd DIR]``."""
    parser = argparse.ArgumentParser(prog="geode mcp serve")
    parser.add_argument("--http", action="store_true", help="streamable HTTP on 127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_HTTP_PORT)
    parser.add_argument("--cwd", type=Path, default=None)
    ns = parser.parse_args(argv)
    try:
        run_main(http=ns.http, port=ns.port, cwd=ns.cwd)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


def run_main(
    *,
    http: bool,
    port: int,
    cwd: Path | None,
    log_json: bool = False,
    log_level: str | None = None,
) -> None:
    """Shared by ``geode mcp serve`` and ``python -m geode.mcp.server``.

    Raises:
        ConfigError: broken configuration or an unreadable ``GEODE_MCP_SCRIPT``.
    """
    import anyio

    from geode.logging import configure_logging
    from geode.settings import load_settings

    workspace = (cwd or Path.cwd()).resolve()
    settings, secrets = load_settings(cwd=workspace)
    # Logs to stderr: on stdio, stdout belongs to the protocol.
    configure_logging(
        json=log_json or settings.log_json, level=log_level or settings.log_level,
        stream=sys.stderr,
    )
    # The entry point is where the environment is read: the testing aid's switch.
    script_env = os.environ.get(SCRIPT_ENV)
    script = Path(script_env) if script_env else None
    if script is not None:
        load_script(script)  # fail at start, not at the first call
        log.warning("scripted model in use (testing aid)", script=str(script))
    anyio.run(
        lambda: serve(workspace=workspace, http=http, port=port, script=script,
                      settings=settings, secrets=secrets)
    )


if __name__ == "__main__":
    main()
