"""``geode skills list``: the installed skills (``$GEODE_HOME/skills``, ``[skills] paths``),
the bindings that offer each, and every SKILL.md that cannot be offered, naming the file."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from geode.cli.app import app

skills_app = typer.Typer(help="Skills (Agent Skills folders) offered to sessions.",
                         no_args_is_help=True)
app.add_typer(skills_app, name="skills")


@skills_app.command("list")
def list_skills(
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """List the skills, where each is and which bindings offer it; exit 1 when a SKILL.md
    is invalid (it is not offered until fixed)."""
    from geode.cli._common import load_typed
    from geode.skills import find_skills, skill_dirs

    settings, _ = load_typed()
    dirs = skill_dirs(settings)
    scan = find_skills(dirs)
    rows: list[dict[str, Any]] = []
    for skill in scan.pick(None):
        offered = [f"{b.platform}:{b.channel}" for b in settings.bindings
                   if b.skills is None or skill.name in b.skills]
        rows.append({"name": skill.name, "description": skill.description,
                     "path": str(skill.folder), "bindings": offered})
    problems = [{"path": str(p.path), "message": p.problem} for p in scan.problems]
    missing = sorted({f"{b.platform}:{b.channel}: {name}" for b in settings.bindings
                      for name in scan.unknown(b.skills or ())})
    if json_out:
        typer.echo(json.dumps({"dirs": [str(d) for d in dirs], "skills": rows,
                               "problems": problems, "unknown_in_bindings": missing},
                              ensure_ascii=False))
    else:
        if not rows:
            typer.echo("no skills installed (folders: " + ", ".join(map(str, dirs)) + ")")
        for row in rows:
            where = ", ".join(row["bindings"]) or "no binding"
            typer.echo(f"{row['name']}  {row['description']}\n    {row['path']}  "
                       f"(offered in: {where})")
        for p in problems:
            typer.echo(f"error: {p['path']}: {p['message']}", err=True)
        for m in missing:
            typer.echo(f"warning: binding {m} names no installed skill", err=True)
    if problems:
        raise typer.Exit(1)
