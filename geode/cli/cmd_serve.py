"""``geode serve``: the daemon (IPC socket, channel connectors, scheduler, health endpoint).

Heavy modules (the store, aiohttp, the runtime) are imported inside the command, so
``geode --help`` stays fast.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from geode.cli._common import SCRIPT_ENV, load_typed
from geode.cli.app import app
from geode.cli.cmd_run import resolve_cwd

if TYPE_CHECKING:
    from geode.settings import Settings


@app.command()
def serve(
    demo: Annotated[
        bool, typer.Option("--demo", help="Every session uses the offline scripted demo model.")
    ] = False,
    cwd: Annotated[
        Path | None,
        typer.Option("--cwd", help="Workspace of scheduled and `geode ask` sessions (default: "
                                    "$GEODE_HOME/workspace; channel bindings have their own)."),
    ] = None,
    drain_timeout: Annotated[
        float, typer.Option("--drain-timeout", min=0.0,
                            help="Seconds running turns get to finish on SIGTERM.")
    ] = 30.0,
) -> None:
    """Run the daemon: IPC socket, channel connectors, scheduler, health endpoint."""
    throwaway = _throwaway_home() if demo else None
    try:
        _serve(demo=demo, cwd=cwd, drain_timeout=drain_timeout, throwaway=throwaway)
    finally:
        if throwaway is not None:
            shutil.rmtree(throwaway, ignore_errors=True)


def _throwaway_home() -> Path | None:
    """``--demo`` without ``GEODE_HOME``: a new home of its own, removed when serve stops,
    so the demo neither reads nor writes ``~/.geode``."""
    if os.environ.get("GEODE_HOME"):
        return None
    home = Path(tempfile.mkdtemp(prefix="geode-demo-"))
    os.environ["GEODE_HOME"] = str(home)
    return home


def _serve(*, demo: bool, cwd: Path | None, drain_timeout: float,
           throwaway: Path | None) -> None:
    from geode.daemon.serve import Daemon, ProviderFactory, describe, scripted_factory
    from geode.plugins import load_part, plugins

    settings, secrets_ = load_typed()
    _log_turns_by_default(settings)
    announce = None
    if demo:
        # what plugins add to a bare configuration (the chat layer: a web chat, offline)
        for plugin in plugins():
            if plugin.demo:
                settings, more = load_part(plugin.demo)(
                    settings, workspace=resolve_cwd(cwd) if cwd else Path.cwd(),
                    throwaway=throwaway is not None)
                announce = more or announce
    from geode.cli.preflight import preflight, refuse_failed

    # the same checks as `geode doctor`: a config refused here is refused there, in the
    # same words (bindings' models and tools, workspaces, [channels.*] options and tokens)
    refuse_failed(preflight(settings, secrets_))
    factory: ProviderFactory | None = None
    label = ""
    script = os.environ.get(SCRIPT_ENV)
    if script:
        factory = scripted_factory(Path(script))
        label = f"scripted model {script} ({SCRIPT_ENV}, a testing aid)"
    elif demo:
        from geode.demo import demo_provider

        factory = demo_provider
        label = "offline demo model (--demo): scripted answers, no API key"
    daemon = Daemon(settings=settings, secrets=secrets_, provider_factory=factory,
                    workspace=resolve_cwd(cwd) if cwd else None, drain_timeout_s=drain_timeout,
                    settle_heap=True, provider_label=label)

    # What plugins host runs inside this daemon, on its lanes and store: the chat layer's
    # connectors, one per enabled [channels.*] (each imports only its own platform's SDK).
    for plugin in plugins():
        if plugin.connectors:
            for connector in load_part(plugin.connectors)(daemon, settings, secrets_):
                daemon.add_connector(connector)

    async def main() -> None:
        daemon.take_signals()  # a SIGTERM while it starts is a graceful stop, too
        await daemon.start()
        for line in describe(daemon):
            typer.echo(line, err=True)
        if throwaway is not None:
            typer.echo(f"  home    {throwaway} (--demo: a throwaway home, removed when serve "
                       "stops; set GEODE_HOME to keep one)", err=True)
        for line in await announce(daemon) if announce is not None else []:
            typer.echo(line, err=True)
        await daemon.serve_forever()
        typer.echo("geode serve: stopped", err=True)

    asyncio.run(main())


def _log_turns_by_default(settings: Settings) -> None:
    """serve logs at INFO unless ``--log-level`` or ``log_level`` (config.toml,
    ``GEODE_LOG_LEVEL``) says otherwise: one line per turn (``turn.done``) is what
    ``journalctl -u geode -f`` should show. Other commands stay at WARNING."""
    from geode.cli import _state

    if _state.LOG_LEVEL is None and "log_level" not in settings.model_fields_set:
        from geode.logging import configure_logging

        configure_logging(json=_state.LOG_JSON or settings.log_json, level="INFO")
