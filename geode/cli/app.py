"""Typer app and the error boundary: ConfigError → exit 2 with its message, never a traceback."""

from __future__ import annotations

import sys
from typing import Annotated, Any

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
    # --install-completion / --show-completion (bash, zsh, fish, PowerShell); completing a
    # word runs `geode` with _GEODE_COMPLETE set, which imports every command module
    add_completion=True,
    pretty_exceptions_enable=False,
)


#: Typer's names for value types, as help shows them (``<str>``, ``<list[Path]>``), and the
#: names a reader expects (Click's convention: ``TEXT``, ``INTEGER``, ``PATH``)
_READABLE_TYPES = {
    "str": "TEXT", "int": "INTEGER", "float": "NUMBER", "bool": "BOOLEAN", "path": "PATH",
    "Path": "PATH", "file": "FILE", "directory": "DIR", "int range": "INTEGER",
    "float range": "NUMBER", "datetime": "DATETIME", "UUID": "UUID",
}


def readable_type(param: Any, ctx: Any) -> str | None:
    """The type of ``param`` as help shows it: ``TEXT``, ``INTEGER``, ``[queue|interrupt]``;
    None for a flag (it takes no value)."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return None
    if param.metavar is not None:
        return str(param.metavar)
    label = str(_typer_display_type(param, ctx)).strip("<>")
    if label.startswith("list[") and label.endswith("]"):
        label = label[5:-1]  # a repeatable option: the help text says "repeatable"
    if param.type_descriptor.is_choice and param.show_choices:
        return f"[{label}]"
    return _READABLE_TYPES.get(label, label.upper())


def _readable_help_types() -> None:
    """Make Typer's help show readable value types instead of ``<bool>`` / ``<str>``
    (Typer >= 0.20 prints Python's names), and arguments as ``NAME`` in the usage line."""
    from typer import core

    def display_type(self: Any, ctx: Any) -> str:
        return readable_type(self, ctx) or ""

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        return readable_type(self, ctx)

    def usage_name(self: Any) -> str:
        name = str(self.metavar or self.name or "").upper()
        name = name if self.required else f"[{name}]"
        return f"{name}..." if self.nargs != 1 else name

    core._TyperParameter.display_type = display_type  # type: ignore[method-assign]
    core._TyperParameter.display_type_rich = display_type_rich  # type: ignore[method-assign]
    core.TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]
    core.TyperArgument._usage_display_name = usage_name  # type: ignore[method-assign]


def _typer_display_type(param: Any, ctx: Any) -> str:
    return str(_TYPER_DISPLAY_TYPE(param, ctx))


def _load_typer_display_type() -> Any:
    from typer import core

    return core._TyperParameter.display_type


_TYPER_DISPLAY_TYPE = _load_typer_display_type()
_readable_help_types()


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


# In the order ``geode --help`` lists them (then the plugins' commands).
_COMMAND_MODULES = ("cmd_info", "cmd_init", "cmd_mcp", "cmd_run", "cmd_serve",
                    "cmd_ask", "cmd_repl", "cmd_schedule", "cmd_sessions", "cmd_usage",
                    "cmd_db", "cmd_skills", "cmd_agents", "cmd_memory", "cmd_replay")


#: each command (or command group) and the module that defines it: a command imports only its
#: own module; help, completion and typos import them all. A plugin's commands (the chat
#: layer's ``bindings``, ``pairing``, ``queue``) come from its spec (:mod:`geode.plugins`),
#: read only for a command not named here. tests/cli/test_lazy_commands.py checks this
#: against what the modules register.
_COMMAND_MODULE = {
    "models": "cmd_info", "doctor": "cmd_info",
    "init": "cmd_init",
    "mcp": "cmd_mcp", "trust": "cmd_mcp",
    "run": "cmd_run",
    "serve": "cmd_serve",
    "ask": "cmd_ask",
    "repl": "cmd_repl",
    "schedule": "cmd_schedule",
    "sessions": "cmd_sessions",
    "skills": "cmd_skills",
    "memory": "cmd_memory",
    "agents": "cmd_agents",
    "usage": "cmd_usage",
    "db": "cmd_db",
    "replay": "cmd_replay",
}


def _register(command: str | None = None) -> None:
    """Register ``command`` (its module, or the plugin command of that name), or every command
    (help, completion, unknown commands).

    Each module adds its commands to ``app``; a plugin's are added here. Imports stay light
    (no SDKs at import time).

    Raises:
        ConfigError: the plugin that has ``command`` does not load.
    """
    import importlib

    module = _COMMAND_MODULE.get(command) if command is not None else None
    if module is not None:
        importlib.import_module(f"geode.cli.{module}")
        return
    if command is not None:
        from geode.plugins import command_owner

        ref = command_owner(command)
        if ref is not None:
            _add_plugin_command(command, ref)
            return
    for name in _COMMAND_MODULES:
        importlib.import_module(f"geode.cli.{name}")
    _add_plugin_commands()


#: the plugin commands already on ``app`` (``_register`` may run more than once: tests)
_PLUGIN_COMMANDS_ADDED: set[str] = set()


def _add_plugin_command(command: str, ref: str) -> None:
    from geode.plugins import load_part

    if command in _PLUGIN_COMMANDS_ADDED:
        return
    found = load_part(ref)
    if isinstance(found, typer.Typer):
        app.add_typer(found, name=command)
    else:  # one command, a function
        app.command(name=command)(found)
    _PLUGIN_COMMANDS_ADDED.add(command)


def _add_plugin_commands() -> None:
    """Every plugin's commands, after the harness's own. A plugin that does not load is
    said on stderr and left out: help and the harness's own commands still answer."""
    from geode.plugins import plugin_commands

    try:
        commands = plugin_commands()
    except ConfigError as exc:
        typer.echo(f"warning: {exc}", err=True)
        return
    for command, ref in commands.items():
        if command not in _COMMAND_MODULE:  # the harness's own name wins
            _add_plugin_command(command, ref)


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
    try:
        _register(_command_of(args))
    except ConfigError as exc:  # the plugin that has this command does not load
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if args and not _INFO_ONLY.intersection(args):
        # A command runs, and logs: structlog without rich, before any module imports it
        # (geode._imports), and without colorama (Windows console colours: GEODE's console
        # renderer has colours off). Help and --version never import structlog at all.
        from geode._imports import import_without

        import_without("structlog", "rich", "colorama")
    try:
        app(args=args)
    except ImportError as exc:
        # a configured platform (or a PostgreSQL store, tracing) whose extra is not installed:
        # a configuration error naming the extra, like any other (geode._imports.EXTRA_OF)
        from geode._imports import missing_extra

        found = missing_extra(exc)
        if found is None:
            raise
        typer.echo(f"error: {found}", err=True)
        sys.exit(2)
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
