"""``geode models`` and ``geode doctor``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from geode.cli.app import app
from geode.cli.cmd_run import resolve_cwd

_PATH_NAMES = {"api": "api", "codex_subscription": "codex"}


@app.command()
def models(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the model catalog: roles, access paths and the credential each path needs."""
    import json

    from geode.errors import ConfigError
    from geode.providers.catalog import (
        PROVIDERS,
        ROLES,
        list_models,
        path_credential,
        refused_paths,
        resolve_generation_model,
        role_model,
    )
    from geode.providers.codex_auth import CodexLogin, codex_auth_file
    from geode.settings import load_settings

    settings, secrets = load_settings()
    login = CodexLogin(
        auth_file=codex_auth_file(settings.codex.home), token_url=settings.codex.token_url
    ).status()

    def credential_set(env: str | None, path: str) -> bool:
        if path == "codex_subscription":
            return login.valid
        return bool(env and secrets.get(env))

    rows: list[dict[str, Any]] = []
    for ref in list_models():
        info = PROVIDERS[ref.provider]
        rows.append(
            {
                "id": ref.id,
                "provider": ref.provider,
                "label": ref.label,
                "kind": ref.kind,
                "roles": list(ref.roles),
                "default": ref.default,
                "paths": {
                    _PATH_NAMES[p]: {
                        "credential": path_credential(ref, p),
                        "credential_set": credential_set(info.key_env, p),
                    }
                    for p in ref.paths
                },
                "context_window": ref.context_window if ref.context_known else None,
                "max_output": ref.max_output if ref.output_known else None,
            }
        )
    overrides = settings.model.roles
    try:
        main = resolve_generation_model(settings.model.default)
        roles_now: dict[str, str] = {
            r: role_model(r, main.provider, overrides).id for r in ROLES
        }
    except ConfigError as exc:  # shown, not fatal: `geode doctor` explains
        roles_now = {"error": str(exc)}
    refused = {p: refused_paths(p) for p in PROVIDERS if refused_paths(p)}
    if json_out:
        out = {
            "default": settings.model.default,
            "path": settings.model.path or "api",
            "roles": roles_now,
            "verify_judge": settings.verify.judge,
            "refused_paths": refused,
            "models": rows,
        }
        typer.echo(json.dumps(out, indent=2, ensure_ascii=False))
        return
    typer.echo(
        f"default model: {settings.model.default}  (set [model] default or GEODE_MODEL; "
        f"--model overrides)"
    )
    typer.echo(
        "roles now:     "
        + ", ".join(f"{k} = {v}" for k, v in roles_now.items())
        + "  ([model.roles] overrides)"
    )
    typer.echo(f"verify judge:  {settings.verify.judge}  ([verify] judge = none | llm | jev)\n")
    typer.echo(f"{'id':28} {'provider':10} {'role':16} {'context':>8}  paths (credential)")
    for r in rows:
        role = ",".join(r["roles"]) or ("default" if r["default"] else "")
        if r["default"] and r["roles"]:
            role += ",default"
        if r["kind"] == "selector":
            role = "route selector"
        elif r["kind"] == "judge":
            role = "judge only"
        window = str(r["context_window"]) if r["context_window"] else "unknown"
        paths = "; ".join(
            f"{name} ({p['credential']}: {'set' if p['credential_set'] else 'missing'})"
            for name, p in r["paths"].items()
        )
        typer.echo(f"{r['id']:28} {r['provider']:10} {role:16} {window:>8}  {paths}")
    typer.echo("")
    for provider, refusals in refused.items():
        for name, why in refusals.items():
            typer.echo(f"refused: {provider} {name} — {why}")
    typer.echo(
        "\n--path codex (or [model] path / [model.paths]) selects the Codex-subscription path "
        "where a model allows it; a model on a path it does not allow is refused, never "
        "served another way. Judge-only ids are for [verify] judge = \"jev\" only. Unknown "
        "context windows are assumed 200000. `provider:model` (e.g. openai:llama3.1) reaches "
        "models outside the catalog through that provider's endpoint."
    )


@app.command()
def doctor(
    cwd: Annotated[Path | None, typer.Option("--cwd", help="Project directory.")] = None,
    json_out: Annotated[bool, typer.Option(
        "--json", help='One JSON object: {"ok", "checks": [{"name", "status", "message", '
                       '"fix"}]}.')] = False,
) -> None:
    """Check config, credentials, store and channels; say what is missing and how to fix it.
    Runs the start checks of `geode serve` (exit 1 when one fails)."""
    from geode.cli.doctor import run_doctor

    ok = asyncio.run(run_doctor(resolve_cwd(cwd), json=json_out))
    raise typer.Exit(0 if ok else 1)
