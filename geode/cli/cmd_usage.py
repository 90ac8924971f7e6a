"""``geode usage``: tokens and cost from the usage ledger (one row per model call)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import datetime, timedelta
from typing import Annotated, Any
from zoneinfo import ZoneInfo

import typer

from geode.cli._common import load_typed, open_store
from geode.cli.app import app
from geode.errors import ConfigError

_RELATIVE = re.compile(r"^(\d+)\s*([dhm])$")


def parse_since(text: str | None, *, now: float, tz: str) -> int:
    """``--since`` as Unix ms: ``7d`` / ``12h`` / ``30m`` ago, a date (its midnight in
    ``tz``) or an ISO date-time (``tz`` when it has no offset). Default: the last 7 days."""
    zone = ZoneInfo(tz)
    if not text:
        text = "7d"
    m = _RELATIVE.match(text.strip())
    if m:
        n, unit = int(m.group(1)), m.group(2)
        delta = {"d": timedelta(days=n), "h": timedelta(hours=n), "m": timedelta(minutes=n)}
        if unit == "d":  # whole days: from midnight, so "1d" is today
            local = datetime.fromtimestamp(now, zone)
            day = (local - delta[unit] + timedelta(days=1)).date()
            return int(datetime(day.year, day.month, day.day, tzinfo=zone).timestamp() * 1000)
        return int((now - delta[unit].total_seconds()) * 1000)
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise ConfigError(f"--since {text!r}: use 7d, 12h, 30m, 2026-12-01 or "
                          "2026-12-01T08:00") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone)
    return int(when.timestamp() * 1000)


@app.command("usage")
def usage(
    by: Annotated[str, typer.Option("--by", help="Group by binding, user, model or day.")] = "day",
    since: Annotated[str | None, typer.Option(
        "--since", help="From 7d / 12h / 30m ago, a date or an ISO date-time "
        "([budgets] timezone). Default: the last 7 days.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Tokens and cost of model calls, from the usage ledger."""
    from geode.store.usage import GROUPINGS, UsageTotals

    if by not in GROUPINGS:
        raise typer.BadParameter(f"{by!r}: use one of {', '.join(GROUPINGS)}", param_hint="--by")
    settings, _ = load_typed()
    tz = settings.budgets.timezone
    try:
        since_ms = parse_since(since, now=time.time(), tz=tz)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc), param_hint="--since") from exc

    async def main() -> list[tuple[str, UsageTotals]]:
        async with await open_store(settings) as store:
            return await store.usage.report(by=by, since_ms=since_ms, tz=tz)

    rows = asyncio.run(main())
    total = UsageTotals()
    for _, t in rows:
        total = total.plus(t)
    since_text = datetime.fromtimestamp(since_ms / 1000, ZoneInfo(tz)).isoformat()
    if json_out:
        out: dict[str, Any] = {"by": by, "since": since_text, "timezone": tz,
                               "rows": [{"key": k, **t.to_json()} for k, t in rows],
                               "total": total.to_json()}
        typer.echo(json.dumps(out, ensure_ascii=False))
        return
    typer.echo(f"usage since {since_text} by {by}")
    if not rows:
        typer.echo("no model calls in this period")
        return
    width = max(12, *(len(k or "-") for k, _ in rows))
    typer.echo(f"{by:<{width}}  {'calls':>7}  {'input':>12}  {'output':>12}  {'tokens':>12}  "
               f"{'cost_usd':>10}")
    for key, t in [*rows, ("total", total)]:
        cost = "-" if t.cost_usd is None else f"{t.cost_usd:.4f}"
        typer.echo(f"{key or '-':<{width}}  {t.calls:>7}  {t.input_tokens:>12,}  "
                   f"{t.output_tokens:>12,}  {t.tokens:>12,}  {cost:>10}")
