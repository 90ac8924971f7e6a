"""``geode models`` and ``geode doctor``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from geode.cli.app import app
from geode.cli.cmd_run import resolve_cwd


@app.command()
def models(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the model catalog, the defaults, and which credential each provider needs."""
    import json

    from geode.providers.catalog import PROVIDERS, list_models
    from geode.settings import load_settings

    settings, secrets = load_settings()
    rows = []
    for ref in list_models():
        info = PROVIDERS[ref.provider]
        rows.append(
            {
                "id": ref.id if hasattr(ref, "id") else ref.model,
                "provider": ref.provider,
                "context_window": ref.context_window,
                "default": ref.default,
                "credential": info.key_env or "-",
                "credential_set": bool(info.key_env and secrets.get(info.key_env)),
            }
        )
    if json_out:
        typer.echo(json.dumps({"default": settings.model.default, "models": rows}, indent=2))
        return
    typer.echo(f"default model: {settings.model.default}  (set [model] default or GEODE_MODEL)\n")
    typer.echo(f"{'id':34} {'provider':11} {'context':>8}  credential")
    for r in rows:
        mark = "*" if r["default"] else " "
        cred = f"{r['credential']} ({'set' if r['credential_set'] else 'missing'})"
        typer.echo(f"{mark}{r['id']:33} {r['provider']:11} {r['context_window']:>8}  {cred}")
    typer.echo(
        "\n* provider default.  `provider:model` (e.g. openai:llama3.1) reaches models "
        "outside the catalog through that provider's endpoint."
    )


@app.command()
def doctor(
    cwd: Annotated[Path | None, typer.Option("--cwd", help="Project directory.")] = None,
) -> None:
    """Check config, credentials, store and channels; say what is missing and how to fix it."""
    from geode.cli.doctor import run_doctor

    ok = asyncio.run(run_doctor(resolve_cwd(cwd)))
    raise typer.Exit(0 if ok else 1)
