"""MCPServerManager: the process's MCP client side, shared by every session of one process.

Servers come from three places, later ones overriding a name of an earlier one:

1. ``[mcp]`` of ``$GEODE_HOME/config.toml`` (the operator's global config);
2. ``--mcp-config FILE`` (the common ``{"mcpServers": {...}}`` JSON);
3. ``[mcp]`` of the project's ``./.geode/config.toml`` — only when ``geode trust`` recorded
   this exact section; otherwise its entries are logged, listed by ``geode doctor`` and
   never spawned.

Servers start lazily on the first :meth:`MCPServerManager.tools_for` and stay up for the
process; one that fails to start is logged with an error naming it, recorded in
:attr:`MCPServerManager.failures`, and skipped — sessions go on without its tools.

Calls and server deaths (ARCHITECTURE.md: an uncertain effect is never re-executed):

- a non-idempotent call in flight when its server dies raises :class:`MCPOutcomeUnknown`
  (the executor marks its effect receipt uncertain); it is not retried;
- an idempotent or read-only call is retried once on the restarted server;
- a call that provably never reached the server (HTTP: a 404 for our session id after the
  server restarted) is sent once more on a fresh session, whatever the tool; one that could
  not connect at all fails at once with the server's name and URL, marked as not sent.

Streamable-HTTP servers are reconnected the way stdio servers are restarted: the supervisor
opens a new session after a call's response stream ends without an answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import mcp_types as mt
import structlog
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from geode.mcp._connection import (
    CallTimedOut,
    NotSent,
    SecretSource,
    ServerConnection,
    ServerDied,
)
from geode.mcp.config import ServerConfig, load_config_file, parse_servers
from geode.mcp.tools import build_tooldef
from geode.mcp.trust import is_trusted, project_config_path, project_mcp_section
from geode.policy import SessionScope
from geode.settings import Settings
from geode.tools.base import ToolDef
from geode.tools.errors import ToolFailure

__all__ = ["MCPOutcomeUnknown", "MCPServerManager"]

log = structlog.get_logger(__name__)

DEFAULT_INIT_TIMEOUT_S = 10.0
DEFAULT_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
#: a server that never started is tried again by a later session after this long
DEFAULT_RETRY_FAILED_S = 60.0


class MCPOutcomeUnknown(ToolFailure):
    """A non-idempotent MCP call whose server died (or went silent) after dispatch.

    The effect may or may not have happened; the executor marks the call's effect receipt
    ``uncertain`` and nothing retries it automatically. The executor need not import this
    module to tell: ``getattr(exc, "outcome_uncertain", False)`` is true for it.
    """

    outcome_uncertain = True


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return a.expanduser().resolve() == b.expanduser().resolve()
    except OSError:
        return False


class MCPServerManager:
    """Starts, supervises and calls the configured MCP servers; offers their tools as ToolDefs."""

    def __init__(
        self,
        *,
        servers: Sequence[ServerConfig],
        secrets: SecretSource | None = None,
        init_timeout_s: float = DEFAULT_INIT_TIMEOUT_S,
        restart_backoff_s: Sequence[float] = DEFAULT_BACKOFF_S,
        retry_failed_after_s: float = DEFAULT_RETRY_FAILED_S,
        untrusted: Sequence[str] = (),
    ) -> None:
        by_name: dict[str, ServerConfig] = {}
        for cfg in servers:
            if cfg.name in by_name:
                log.info("mcp server entry overridden", server=cfg.name,
                         previous=by_name[cfg.name].origin, now=cfg.origin)
            by_name[cfg.name] = cfg
        self.configs: dict[str, ServerConfig] = by_name
        #: server name → why it is not running (doctor shows these)
        self.failures: dict[str, str] = {}
        #: bumped whenever the set of MCP tools changes; the next step's plan picks it up
        self.generation = 0
        #: project servers skipped because the project is not trusted (never spawned)
        self.untrusted: tuple[str, ...] = tuple(untrusted)
        self._retry_failed_after_s = retry_failed_after_s
        self._conns = {
            name: ServerConnection(
                config=cfg, secrets=secrets, init_timeout_s=init_timeout_s,
                backoff_s=restart_backoff_s, on_change=self._tools_changed,
            )
            for name, cfg in by_name.items()
        }
        self._tooldefs: tuple[ToolDef, ...] = ()
        self._tool_key: tuple[tuple[str, str, str], ...] = ()
        self._start_lock: asyncio.Lock | None = None
        self._closed = False

    # -- construction --------------------------------------------------------------------

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        secrets: Any,
        *,
        extra_files: Iterable[Path] = (),
        project_dir: Path | None = None,
    ) -> MCPServerManager:
        """Collect servers from the global config, ``--mcp-config`` files and a trusted project.

        Raises:
            ConfigError: a malformed entry or file (the message names it).
        """
        home = settings.home
        project_section = None
        if project_dir is not None and not _same_dir(project_dir, home.parent):
            project_section = project_mcp_section(project_dir)
        # settings.mcp is the operator's config only: the settings loader never merges a
        # project's [mcp] (PROJECT_SEPARATE), which is read here, and used only if trusted.
        servers = parse_servers(settings.mcp, origin=str(home / "config.toml"))
        for f in extra_files:
            servers.extend(load_config_file(Path(f)))
        untrusted: list[str] = []
        if project_section is not None and project_dir is not None:
            origin = str(project_config_path(project_dir))
            project_servers = parse_servers(
                project_section, origin=origin, default_cwd=str(project_dir.resolve())
            ) if is_trusted(project_dir, home, project_section) else None
            if project_servers is None:
                from geode.mcp.config import servers_section

                untrusted = sorted(str(n) for n in servers_section(project_section))
                if untrusted:
                    log.warning(
                        "project MCP servers are not trusted and will not run",
                        servers=untrusted, config=origin,
                        fix=f"review it, then run `geode trust {project_dir}`",
                    )
            else:
                servers.extend(project_servers)
        opts = settings.mcp if isinstance(settings.mcp, Mapping) else {}
        init_timeout = float(opts.get("startup_timeout_s", DEFAULT_INIT_TIMEOUT_S))
        return cls(servers=servers, secrets=secrets, init_timeout_s=init_timeout,
                   untrusted=untrusted)

    # -- tools ---------------------------------------------------------------------------

    @property
    def servers(self) -> list[str]:
        return list(self.configs)

    def status(self) -> dict[str, str]:
        """Server name → state (idle, starting, ready, restarting, failed, closed)."""
        return {name: conn.state for name, conn in self._conns.items()}

    async def start(self) -> None:
        """Start every server not yet started (and retry failed ones whose wait is over)."""
        if self._closed or not self._conns:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        loop = asyncio.get_running_loop()
        async with self._start_lock:
            due = [
                c for c in self._conns.values()
                if c.state == "idle" or (c.state == "failed" and loop.time() >= c.retry_at)
            ]
            if not due:
                return
            await asyncio.gather(*(c.start() for c in due))
            for c in due:
                if c.state == "failed":
                    self.failures[c.name] = c.error or f"MCP server {c.name!r} failed to start"
                    c.retry_at = loop.time() + self._retry_failed_after_s
                else:
                    self.failures.pop(c.name, None)

    async def tools_for(self, scope: SessionScope | None = None) -> list[ToolDef]:
        """The MCP tools this session may see (starting servers on first use)."""
        await self.start()
        return self.current_tools(scope)

    def current_tools(self, scope: SessionScope | None = None) -> list[ToolDef]:
        """The MCP tools as of now, without starting anything (for a plan refresh)."""
        return [t for t in self._tooldefs if scope is None or scope.permits(t.name)]

    def _tools_changed(self) -> None:
        defs: list[ToolDef] = []
        seen: set[str] = set()
        for name, conn in self._conns.items():
            if conn.state != "ready":
                continue
            for tool in conn.tools:
                try:
                    td = build_tooldef(conn.config, tool, self._call)
                except (ValidationError, ValueError) as exc:
                    log.warning("mcp tool skipped", server=name, tool=tool.name, error=str(exc))
                    continue
                if td.name in seen:
                    log.warning("mcp tool name collision; later one skipped", tool=td.name)
                    continue
                seen.add(td.name)
                defs.append(td)
        key = tuple(sorted((d.name, d.safety, repr(d.input_schema)) for d in defs))
        self._tooldefs = tuple(defs)
        if key != self._tool_key:
            self._tool_key = key
            self.generation += 1

    # -- calls ---------------------------------------------------------------------------

    async def _call(
        self,
        server: str,
        tool: str,
        args: Mapping[str, Any],
        *,
        deadline_s: float,
        retry_safe: bool,
    ) -> mt.CallToolResult:
        conn = self._conns.get(server)
        if conn is None:
            raise ToolFailure(f"MCP server {server!r} is not configured")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + deadline_s

        def left() -> float:
            return max(deadline - loop.time(), 0.0)

        http = conn.config.transport == "http"
        if not await conn.wait_ready(wait_s=min(left(), 30.0), until_attempt_fails=http):
            raise ToolFailure(
                f"MCP server {server!r} is not {'reachable' if http else 'running'} "
                f"({conn.error or conn.state}); the call was not sent"
            )
        epoch = conn.epoch
        try:
            return await self._call_once(conn, tool, args, left(), retry_safe)
        except NotSent as exc:
            if exc.unreachable:
                raise ToolFailure(
                    f"MCP server {server!r} is not reachable ({exc}); the call to {tool!r} "
                    "was not sent"
                ) from None
            # The server rejected our session before running anything: resending on a new
            # session cannot duplicate an effect, so this holds for non-idempotent tools too.
            log.warning("mcp server lost our session; resending once", server=server, tool=tool)
            why = "its session was lost and the call was not sent"
        except ServerDied as exc:
            if not retry_safe:
                raise MCPOutcomeUnknown(
                    f"outcome unknown: MCP server {server!r} died during the call to {tool!r} "
                    f"({exc}); not retried because the tool is not idempotent. Check whether "
                    "its effect happened before trying again."
                ) from None
            # Idempotent / read-only: exactly one retry, on the restarted server.
            log.warning("mcp server died mid-call; retrying once", server=server, tool=tool)
            why = "it died during the call"
        if not await conn.wait_ready(newer_than=epoch, wait_s=left(), nudge=http):
            raise ToolFailure(
                f"MCP server {server!r} did not come back before the deadline of {tool!r} "
                f"({why}; {conn.error or conn.state})"
            )
        try:
            return await self._call_once(conn, tool, args, left(), retry_safe)
        except NotSent as exc:
            raise ToolFailure(
                f"MCP server {server!r}: the retry of {tool!r} was not sent ({exc}); giving up"
            ) from None
        except ServerDied as exc:
            if not retry_safe:
                raise MCPOutcomeUnknown(
                    f"outcome unknown: MCP server {server!r} died during the call to {tool!r} "
                    f"({exc}); not retried again. Check whether its effect happened before "
                    "trying again."
                ) from None
            raise ToolFailure(
                f"MCP server {server!r} died again during the retry of {tool!r} ({exc}); "
                "giving up"
            ) from None

    async def _call_once(
        self,
        conn: ServerConnection,
        tool: str,
        args: Mapping[str, Any],
        budget_s: float,
        retry_safe: bool,
    ) -> mt.CallToolResult:
        try:
            return await conn.call(tool, args, budget_s=max(budget_s, 0.001))
        except CallTimedOut:
            if retry_safe:
                raise ToolFailure(
                    f"MCP tool {conn.name}__{tool} gave no answer before its deadline"
                ) from None
            raise MCPOutcomeUnknown(
                f"outcome unknown: MCP tool {conn.name}__{tool} gave no answer before its "
                "deadline; the server may still be working on it. Not retried."
            ) from None
        except MCPError as exc:
            raise ToolFailure(f"MCP server {conn.name!r} refused the call: {exc.message}") from None
        except ValidationError as exc:
            raise ToolFailure(
                f"MCP server {conn.name!r} returned a malformed result: {exc.error_count()} "
                "validation error(s)"
            ) from None

    # -- shutdown ------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop every server (stdin closed, then terminated if it lingers)."""
        self._closed = True
        await asyncio.gather(*(c.aclose() for c in self._conns.values()),
                             return_exceptions=True)
        self._tooldefs = ()

    async def probe(self) -> dict[str, str]:
        """Start every server once, then stop them; returns :attr:`failures` (for doctor)."""
        try:
            await self.start()
        finally:
            await self.aclose()
        return dict(self.failures)

    async def __aenter__(self) -> MCPServerManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
