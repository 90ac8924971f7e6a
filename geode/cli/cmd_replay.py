"""``geode replay``: re-run recorded sessions against this build and report every changed
decision (exit 0 none, 1 some, 2 usage or configuration error)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from geode.cli.app import app
from geode.errors import ConfigError

if TYPE_CHECKING:
    from geode.replay import Recording, SessionReplay
    from geode.settings import Secrets, Settings
    from geode.store import SessionRecord

_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str) -> timedelta:
    """``30m`` / ``24h`` / ``7d`` / ``2w`` as a duration (ConfigError otherwise)."""
    found = _SINCE.match(text)
    if found is None:
        raise ConfigError(f"--since {text!r}: give a duration such as 30m, 24h, 7d or 2w.")
    return timedelta(seconds=float(found.group(1)) * _UNIT_S[found.group(2)])


def binding_sessions(records: list[SessionRecord], name: str,
                     since: datetime) -> list[SessionRecord]:
    """The sessions of binding ``name`` (``PLATFORM:CHANNEL``) updated since ``since``,
    oldest first: those the binding's policy was recorded for, or (sessions from before
    that was recorded) a channel session whose id names its platform and channel."""
    from geode.replay.recording import binding_of

    return sorted((r for r in records if r.updated_at >= since
                   and binding_of(r.id, r.mode, r.metadata) == name),
                  key=lambda r: r.created_at)


@contextmanager
def _settings_from(config: Path | None) -> Iterator[tuple[Settings, Secrets]]:
    """The operator's settings, or (``--config FILE``) FILE's alone in a home of its own:
    FILE replaces ``config.toml`` (its credentials still come from the environment)."""
    from geode.cli._common import load_typed

    if config is None:
        yield load_typed()
        return
    if not config.is_file():
        raise ConfigError(f"--config {config}: no such file.")
    import os

    from geode.settings import load_settings

    with tempfile.TemporaryDirectory(prefix="geode-replay-config-") as tmp:
        shutil.copyfile(config, Path(tmp) / "config.toml")
        settings, secrets = load_settings(cwd=Path(tmp),
                                          env={**os.environ, "GEODE_HOME": tmp})
        yield settings, secrets


def _read_export(file: Path) -> Recording:
    from geode.replay import read_jsonl

    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read it ({exc.strerror or exc}).") from exc
    return read_jsonl(_export_lines(text), where=str(file))


def _export_lines(text: str) -> list[str]:
    """The export's records, one per line: as written (JSON lines), or from the one object
    ``geode sessions export --json`` writes."""
    try:
        whole = json.loads(text)
    except ValueError:
        return text.splitlines()  # JSON lines: several documents
    if isinstance(whole, dict) and isinstance(whole.get("records"), list):
        return [json.dumps(r) for r in whole["records"]]
    return text.splitlines()


async def _recordings(
    *, sessions: list[str], binding: str | None, since: str | None
) -> list[Recording]:
    from geode.cli._common import load_typed, open_store
    from geode.replay import load_recording

    settings, _ = load_typed()
    async with await open_store(settings) as store:
        ids = list(sessions)
        if binding is not None:
            cutoff = datetime.now(UTC) - parse_since(since or "7d")
            records = await store.sessions.list(limit=1_000_000)
            ids = [r.id for r in binding_sessions(records, binding, cutoff)]
        return [await load_recording(store, sid) for sid in ids]


def _table(results: list[SessionReplay]) -> Iterator[str]:
    turns = sum(r.turns for r in results)
    diffs = [d for r in results for d in r.differences]
    for r in results:
        for note in r.notes:
            yield f"note: {r.session_id}: {note}"
    if diffs:
        yield (f"{'SESSION':24}  {'TURN':4}  {'STEP':28}  {'TOOL':14}  {'FIELD':12}  "
               f"{'RECORDED':24}  REPLAYED")
        for d in diffs:
            for c in d.changes:
                yield (f"{d.session_id[:24]:24}  {d.turn:<4}  {d.step[:28]:28}  "
                       f"{d.tool[:14]:14}  {c.field:12}  {c.recorded[:24]:24}  {c.replayed}")
    yield (f"replayed {len(results)} session(s), {turns} turn(s): "
           + (f"{len(diffs)} step(s) decided differently" if diffs else "no difference"))


@app.command()
def replay(
    file: Annotated[Path | None, typer.Argument(
        help="A session export (`geode sessions export ID`) to replay.")] = None,
    session: Annotated[list[str] | None, typer.Option(
        "--session", help="Replay this recorded session; repeatable.")] = None,
    binding: Annotated[str | None, typer.Option(
        "--binding", help="Replay the sessions of this binding (PLATFORM:CHANNEL).")] = None,
    since: Annotated[str | None, typer.Option(
        "--since", help="With --binding: sessions active within this long (30m, 24h, 7d; "
        "default 7d).")] = None,
    config: Annotated[Path | None, typer.Option(
        "--config", help="Replay under this config file instead of config.toml.")] = None,
    allow_tool: Annotated[list[str] | None, typer.Option(
        "--allow-tool", help="Also allow this tool; repeatable.")] = None,
    deny_tool: Annotated[list[str] | None, typer.Option(
        "--deny-tool", help="Deny this tool; repeatable.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Re-run recorded sessions with their recorded model responses against this build
    (tools on a throwaway copy of the workspace; nothing reaches the world) and list every
    step decided differently. Exit 0: no difference; 1: some; 2: usage error."""
    inputs = sum(x for x in (file is not None, bool(session), binding is not None))
    try:
        if inputs != 1:
            raise ConfigError("Give one of: --session ID, --binding NAME [--since 7d], or an "
                              "export FILE.")
        if since is not None and binding is None:
            raise ConfigError("--since goes with --binding NAME.")
        results = _run(file=file, sessions=list(session or ()), binding=binding, since=since,
                       config=config, allow=tuple(allow_tool or ()),
                       deny=tuple(deny_tool or ()))
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if json_out:
        out: dict[str, Any] = {"sessions": [r.to_json() for r in results],
                               "differences": sum(len(r.differences) for r in results)}
        typer.echo(json.dumps(out, ensure_ascii=False))
    else:
        for line in _table(results):
            typer.echo(line)
    raise typer.Exit(1 if any(r.differences for r in results) else 0)


def _run(*, file: Path | None, sessions: list[str], binding: str | None, since: str | None,
         config: Path | None, allow: tuple[str, ...],
         deny: tuple[str, ...]) -> list[SessionReplay]:
    from geode.replay import ReplayPolicy, replay_all

    if since is not None:
        parse_since(since)  # a usage error before anything is opened
    recordings = ([_read_export(file)] if file is not None else
                  asyncio.run(_recordings(sessions=sessions, binding=binding, since=since)))
    policy = ReplayPolicy(allow_tools=allow, deny_tools=deny)
    with _settings_from(config) as (settings, secrets):

        return asyncio.run(replay_all(recordings, settings=settings, secrets=secrets,
                                      policy=policy))
