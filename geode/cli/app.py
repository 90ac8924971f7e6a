"""Typer app and the error boundary: ConfigError → exit 2 with its message, never a traceback."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from geode import __version__
from geode.errors import ConfigError, StoreError, StoreUnavailableError

#: the store's server did not answer (sysexits' EX_TEMPFAIL): worth a restart, unlike exit 2
EXIT_STORE_UNAVAILABLE = 75

app = typer.Typer(
    name="geode",
    help="GEODE: an agent harness with a host-held tool boundary, run from the terminal or as "
    "a chat-ops service.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"geode {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
    log_json: Annotated[bool, typer.Option("--log-json", help="Log as JSON lines.")] = False,
    log_level: Annotated[
        str | None, typer.Option("--log-level", help="DEBUG, INFO, WARNING (default), ERROR.")
    ] = None,
) -> None:
    from geode.cli import _state

    if log_level is not None:  # checked here: not every command configures logging
        from geode.logging import parse_log_level

        parse_log_level(log_level, what="--log-level")
    _state.LOG_JSON = log_json
    _state.LOG_LEVEL = log_level


# In the order ``geode --help`` lists them.
_COMMAND_MODULES = ("cmd_channels", "cmd_info", "cmd_init", "cmd_mcp", "cmd_run", "cmd_serve",
                    "cmd_ask", "cmd_repl", "cmd_schedule", "cmd_sessions", "cmd_usage",
                    "cmd_db", "cmd_queue")


#: each command (or command group) and the module that defines it: a command imports only its
#: own module (``cmd_channels`` alone is ~28 ms); help, completion and typos import them all.
#: tests/cli/test_lazy_commands.py checks this against what the modules register.
_COMMAND_MODULE = {
    "bindings": "cmd_channels", "pairing": "cmd_channels",
    "models": "cmd_info", "doctor": "cmd_info",
    "init": "cmd_init",
    "mcp": "cmd_mcp", "trust": "cmd_mcp",
    "run": "cmd_run",
    "serve": "cmd_serve",
    "ask": "cmd_ask",
    "repl": "cmd_repl",
    "schedule": "cmd_schedule",
    "sessions": "cmd_sessions",
    "usage": "cmd_usage",
    "db": "cmd_db",
    "queue": "cmd_queue",
}


def _register(command: str | None = None) -> None:
    """Import the module of ``command``, or every command module (help, unknown commands).

    Each module adds its commands to ``app``; imports stay light (no SDKs at import time).
    """
    import importlib

    module = _COMMAND_MODULE.get(command) if command is not None else None
    for name in (module,) if module is not None else _COMMAND_MODULES:
        importlib.import_module(f"geode.cli.{name}")


#: the root options, accepted after the subcommand too (``geode serve --log-level INFO``)
_ROOT_VALUE_OPTS = ("--log-level",)
_ROOT_FLAGS = ("--log-json",)


def hoist_root_options(args: list[str]) -> list[str]:
    """Move root options given after a subcommand to the front, where Click parses them.

    Stops at ``--``: what follows is an argument, whatever it looks like.
    """
    hoisted: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        if arg in _ROOT_FLAGS or arg.startswith(tuple(f"{o}=" for o in _ROOT_VALUE_OPTS)):
            hoisted.append(arg)
        elif arg in _ROOT_VALUE_OPTS and i + 1 < len(args):
            hoisted += args[i:i + 2]
            i += 1
        else:
            rest.append(arg)
        i += 1
    return hoisted + rest


#: what only asks for help or the version: no command runs, nothing is logged
_INFO_ONLY = frozenset({"--help", "-h", "--version"})


def _command_of(args: list[str]) -> str | None:
    """The subcommand ``args`` (root options hoisted first) invoke, or None (help, no command).

    Only a name Click would dispatch on: the first argument that is neither a root option nor
    its value, and no ``--help``/``--version`` before it (those answer from the root).
    """
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _ROOT_VALUE_OPTS:
            i += 2
            continue
        if arg in _ROOT_FLAGS or arg.startswith(tuple(f"{o}=" for o in _ROOT_VALUE_OPTS)):
            i += 1
            continue
        return None if arg.startswith("-") else arg
    return None


def main() -> None:
    args = hoist_root_options(sys.argv[1:])
    _register(_command_of(args))
    if args and not _INFO_ONLY.intersection(args):
        # A command runs, and logs: structlog without rich, before any module imports it
        # (geode._imports), and without colorama (Windows console colours: GEODE's console
        # renderer has colours off). Help and --version never import structlog at all.
        from geode._imports import import_without

        import_without("structlog", "rich", "colorama")
    try:
        app(args=args)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except StoreUnavailableError as exc:
        # not the operator's configuration (maybe): the server may come back, so a supervisor
        # should restart us (deploy/geode.service keeps 2, not this, in RestartPreventExitStatus)
        typer.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_STORE_UNAVAILABLE)
    except StoreError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
