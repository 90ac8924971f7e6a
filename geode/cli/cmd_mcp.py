"""``geode mcp serve``, ``geode mcp list`` and ``geode trust [DIR]``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from geode.cli.app import app
from geode.cli.cmd_run import resolve_cwd

__all__ = ["mcp_app"]

mcp_app = typer.Typer(
    help="MCP: GEODE as an MCP server, and the MCP servers GEODE uses.",
    no_args_is_help=True,
)
app.add_typer(mcp_app, name="mcp")


@mcp_app.command("serve")
def serve(
    http: Annotated[
        bool, typer.Option("--http", help="Streamable HTTP on 127.0.0.1 instead of stdio.")
    ] = False,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="HTTP port.")] = 8765,
    cwd: Annotated[
        Path | None, typer.Option("--cwd", help="Workspace of the runs (default: here).")
    ] = None,
) -> None:
    """Serve `run_agent`, `list_sessions` and `session_timeline` to an MCP host."""
    from geode.cli import _state
    from geode.mcp.server import run_main

    run_main(http=http, port=port, cwd=resolve_cwd(cwd), log_json=_state.LOG_JSON,
             log_level=_state.LOG_LEVEL)


@mcp_app.command("list")
def list_servers(
    cwd: Annotated[Path | None, typer.Option("--cwd", help="Project directory.")] = None,
    mcp_config: Annotated[
        list[Path] | None, typer.Option("--mcp-config", help="Extra MCP servers JSON file.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of the lines.")
    ] = False,
) -> None:
    """Start the configured MCP servers once and show their state and tools (exit 1 when
    any server failed)."""
    from geode.cli import _state
    from geode.logging import configure_logging
    from geode.mcp.manager import MCPServerManager
    from geode.settings import load_settings

    where = resolve_cwd(cwd)
    settings, secrets = load_settings(cwd=where)
    # The listing is the report: a failing server is one [FAIL] line, not that line plus
    # the log's copy of it (--log-level brings the log back).
    configure_logging(json=_state.LOG_JSON, level=_state.LOG_LEVEL or "CRITICAL")
    manager = MCPServerManager.from_settings(
        settings, secrets, extra_files=tuple(mcp_config or ()), project_dir=where
    )

    async def probe() -> list[dict[str, Any]]:
        try:
            tools = await manager.tools_for(None)
        except Exception as exc:  # a misbehaving server never ends in a traceback here
            return [{"name": None, "status": "failed",
                     "error": f"starting the MCP servers: {type(exc).__name__}: {exc}",
                     "tools": []}]
        finally:
            await manager.aclose()
        by_server: dict[str, list[dict[str, str]]] = {}
        for t in tools:
            by_server.setdefault(t.source.removeprefix("mcp:"), []).append(
                {"name": t.name, "safety": str(t.safety)})
        report: list[dict[str, Any]] = []
        for name in manager.servers:
            failed = name in manager.failures
            report.append({"name": name, "status": "failed" if failed else "ok",
                           "error": str(manager.failures[name]) if failed else None,
                           "tools": [] if failed else by_server.get(name, [])})
        for name in manager.untrusted:
            report.append({"name": name, "status": "untrusted",
                           "error": f"project server not trusted, not started (run `geode "
                                    f"trust {where}`)", "tools": []})
        return report

    servers = asyncio.run(probe())
    if as_json:
        typer.echo(json.dumps({"project": str(where), "servers": servers}, ensure_ascii=False))
    else:
        _print_servers(servers)
    raise typer.Exit(1 if any(s["status"] == "failed" for s in servers) else 0)


def _print_servers(servers: list[dict[str, Any]]) -> None:
    for server in servers:
        if server["status"] == "failed":
            label = f"{server['name']}: " if server["name"] else ""
            typer.echo(f"[FAIL] {label}{server['error']}")
        elif server["status"] == "untrusted":
            typer.echo(f"[warn] {server['name']}: {server['error']}")
        else:
            typer.echo(f"[ok  ] {server['name']}: {len(server['tools'])} tool(s)")
            for t in server["tools"]:
                typer.echo(f"         {t['name']} ({t['safety']})")
    if not servers:
        typer.echo("no MCP servers configured")


@app.command("trust")
def trust(
    directory: Annotated[
        Path | None, typer.Argument(help="Project directory (default: here).")
    ] = None,
) -> None:
    """Trust the MCP servers of DIR/.geode/config.toml (a later change needs trust again)."""
    from geode.mcp.config import parse_servers
    from geode.mcp.trust import project_config_path, project_mcp_section, trust_project
    from geode.settings import geode_home

    where = (directory or Path.cwd()).resolve()
    if not where.is_dir():
        from geode.errors import ConfigError

        raise ConfigError(f"no such directory: {where}")
    section = project_mcp_section(where)
    home = geode_home()
    if section is not None:
        # Show what is being trusted: these commands will run with the operator's rights.
        for cfg in parse_servers(section, origin=str(project_config_path(where)),
                                 default_cwd=str(where)):
            target = cfg.url or " ".join([cfg.command or "", *cfg.args])
            typer.echo(f"  {cfg.name}: {target}")
    rec = trust_project(where, home)
    typer.echo(f"trusted {len(rec.servers)} MCP server(s) of {where} (sha256 {rec.sha256[:12]}…)")
