"""``geode run``: one in-process turn (HEADLESS unless flags say otherwise)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from geode.cli.app import app
from geode.errors import ConfigError

ModelOpt = Annotated[
    str | None, typer.Option("--model", "-m", help="Model id (see `geode models`).")
]
PathOpt = Annotated[
    str | None,
    typer.Option(
        "--path",
        help="Access path: api (the provider's key) or codex (the Codex CLI login); "
        "`geode models` shows which models allow which.",
    ),
]
SessionOpt = Annotated[
    str | None, typer.Option("--session", "-s", help="Continue this session id.")
]
ContinueOpt = Annotated[
    bool, typer.Option("--continue", "-c", help="Continue this workspace's last session.")
]
McpOpt = Annotated[
    list[Path] | None,
    typer.Option("--mcp-config", help='MCP servers JSON ({"mcpServers": ...}); repeatable.'),
]
AllowOpt = Annotated[
    list[str] | None, typer.Option("--allow-tool", help="Allow a tool the mode denies; repeatable.")
]
DenyOpt = Annotated[list[str] | None, typer.Option("--deny-tool", help="Deny a tool; repeatable.")]
RoundsOpt = Annotated[int | None, typer.Option("--max-rounds", min=1, help="Round limit.")]
BudgetOpt = Annotated[
    float | None, typer.Option("--time-budget", min=0.1, help="Time budget in seconds.")
]
CwdOpt = Annotated[
    Path | None, typer.Option("--cwd", help="Workspace root for file tools (default: here).")
]


def resolve_cwd(cwd: Path | None) -> Path:
    """``--cwd DIR`` (default: here), resolved; a directory that does not exist is exit 2."""
    where = (cwd or Path.cwd()).expanduser().resolve()
    if not where.is_dir():
        what = "not a directory" if where.exists() else "no such directory"
        raise ConfigError(f"--cwd {cwd}: {what} ({where}).")
    return where


def read_prompt(prompt: str) -> str:
    """``-`` reads the prompt from stdin (any size)."""
    if prompt == "-":
        data = sys.stdin.read()
        if not data.strip():
            raise ConfigError("The prompt from stdin is empty.")
        return data
    if not prompt.strip():
        raise ConfigError("The prompt is empty.")
    return prompt


@app.command()
def run(
    prompt: Annotated[str, typer.Argument(help="The task; `-` reads it from stdin.")],
    model: ModelOpt = None,
    path: PathOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    session: SessionOpt = None,
    continue_last: ContinueOpt = False,
    mcp_config: McpOpt = None,
    allow_tool: AllowOpt = None,
    deny_tool: DenyOpt = None,
    max_rounds: RoundsOpt = None,
    time_budget: BudgetOpt = None,
    cwd: CwdOpt = None,
    demo: Annotated[
        bool, typer.Option("--demo", help="Offline demo: a scripted model, no API key needed.")
    ] = False,
    stream: Annotated[bool, typer.Option("--stream/--no-stream", help="Stream text.")] = False,
) -> None:
    """Run one turn in-process and print the final answer (exit 0 natural end, 1 other end)."""
    from geode.cli._runtime import RunOptions, run_once

    if session and continue_last:
        raise ConfigError("Use --session ID or -c/--continue, not both.")
    opts = RunOptions(
        prompt=read_prompt(prompt),
        model=model,
        path=path,
        session_id=session,
        continue_last=continue_last,
        mcp_configs=tuple(mcp_config or ()),
        allow_tools=tuple(allow_tool or ()),
        deny_tools=tuple(deny_tool or ()),
        max_rounds=max_rounds,
        time_budget_s=time_budget,
        workspace=resolve_cwd(cwd),
        demo=demo,
        stream=stream and not json_out,
    )
    from geode.secret_redaction import redact, redact_text

    result = asyncio.run(run_once(opts))
    # the same redaction as channel replies and logs: a secret the model echoed (or a
    # tool's output carried into the answer) is masked on every output path
    if json_out:
        typer.echo(json.dumps(redact(result.to_json()), ensure_ascii=False))
    elif opts.stream:
        typer.echo("")
    elif not result.text_is_note:  # a failed turn's reason is printed once, below
        typer.echo(redact_text(result.text))
    if not result.ok and not json_out:
        typer.echo(redact_text(f"[{result.termination.value}] {result.detail}"), err=True)
    raise typer.Exit(0 if result.ok else 1)
