"""``geode init``: a commented ``config.toml`` and an empty ``.env`` (mode 0600) in ``$GEODE_HOME``.

The config is the example shipped inside the package (``geode/cli/config.example.toml``, a link
to ``config/config.example.toml`` in the repository, copied into the wheel), so a pip-installed
GEODE has it too. Existing files are kept: ``.env`` always (it holds secrets), ``config.toml``
unless ``--force`` or a "yes" at the terminal. Without a terminal nothing is asked.
"""

from __future__ import annotations

import json
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from geode.cli.app import app

_ENV_HEAD = """\
# Secrets for GEODE: one NAME=value per line. Keep this file mode 0600; never commit it.
# GEODE reads it itself (the process environment wins over it), e.g.:
# ANTHROPIC_API_KEY=sk-ant-...
# OPENAI_API_KEY=...
"""


def _env_template() -> str:
    """The commented ``.env``: the providers' keys, then each plugin's lines (the chat
    layer's: each registered platform's)."""
    from geode.plugins import load_part, plugins

    lines = [line for plugin in plugins() if plugin.env_lines
             for line in load_part(plugin.env_lines)()]
    return _ENV_HEAD + "".join(f"{line}\n" for line in lines)


def example_config() -> str:
    """The commented example configuration shipped with GEODE."""
    return resources.files("geode.cli").joinpath("config.example.toml").read_text(encoding="utf-8")


@app.command()
def init(
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace an existing config.toml (.env is never replaced)."),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print what was done as one JSON object.")
    ] = False,
) -> None:
    """Write a commented config.toml and an empty .env (mode 0600) into $GEODE_HOME."""
    from geode.settings import geode_home

    home = geode_home()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    config = home / "config.toml"
    # with --json nothing is asked: a script reads the answer, nobody types one
    if config.exists() and not force and (as_json or not _confirm(f"{config} exists; replace it?")):
        config_action = "kept"
    else:
        _write(config, example_config(), mode=0o600)  # bindings, user ids: doctor wants 0600
        config_action = "wrote"
    env = home / ".env"
    if env.exists():
        if env.stat().st_mode & 0o077:
            env.chmod(0o600)
            env_action, env_note = "kept", " (mode set to 0600: others could read it)"
        else:
            env_action, env_note = "kept", ""
    else:
        _write(env, _env_template(), mode=0o600)
        env_action, env_note = "wrote", " (mode 0600)"
    if as_json:
        typer.echo(json.dumps({
            "home": str(home),
            "config": {"path": str(config), "action": config_action},
            "env": {"path": str(env), "action": env_action, "mode": "0600"},
        }))
        return
    typer.echo(f"{config_action:<6} {config}")
    typer.echo(f"{env_action:<6} {env}{env_note}")
    typer.echo("next:  put a provider key (e.g. ANTHROPIC_API_KEY=...) in that .env, then run "
               "`geode doctor`; `geode serve --demo` runs offline as it is")


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():  # scripts, CI, containers: never ask, never replace
        return False
    return typer.confirm(question, default=False)


def _write(path: Path, text: str, *, mode: int) -> None:
    """Write ``text`` with ``mode`` from the first byte on (a secret file is never briefly 0644)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # the umask may have taken bits away; set exactly what we mean
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fd = -1  # the file object owns it now
            fh.write(text)
        os.replace(tmp, path)
    finally:
        if fd != -1:
            os.close(fd)
        tmp.unlink(missing_ok=True)
