"""Channel commands: ``geode bindings list / add / remove``, ``geode pairing list / approve``.

The chat layer's plugin (:mod:`bots.plugin`) adds them to ``geode``; this module only defines
them (importing it registers nothing, and costs no SDK).

Bindings from ``[[bindings]]`` in config.toml are shown but never changed here (the file is
the operator's source of truth); ``bindings add`` stores a binding in the store, where a
running ``geode serve`` picks it up within seconds. ``pairing approve CODE`` allows the
sender who received CODE on that platform.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from geode.settings import BindingSettings, Settings
    from geode.store import Store

bindings_app = typer.Typer(help="Channels the bot serves, and their DAEMON policy.",
                           no_args_is_help=True)
pairing_app = typer.Typer(help="Pairing codes of unknown senders.", no_args_is_help=True)

#: the platform arguments' help: the registered platforms are listed where a name is wrong
_PLATFORM_HELP = "A registered platform (the name of its [channels.NAME] table)."


def _settings() -> Settings:
    from geode.cli._common import load_typed

    settings, _ = load_typed()
    return settings


async def _open(settings: Settings) -> Store:
    from geode.store import open_store

    settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return await open_store(settings.store_url)


def _binding_json(b: BindingSettings, source: str) -> dict[str, Any]:
    return {"source": source, **b.model_dump(mode="json")}


# -- geode bindings ------------------------------------------------------------------------------


@bindings_app.command("list")
def bindings_list(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List bindings: config.toml ones and those added with `geode bindings add`."""
    from bots.store import StoredBindings

    settings = _settings()

    async def main() -> list[BindingSettings]:
        async with await _open(settings) as store:
            return await StoredBindings(store=store).list()

    stored = asyncio.run(main())
    rows = [("config", b) for b in settings.bindings] + [("store", b) for b in stored]
    if json_out:
        typer.echo(json.dumps([_binding_json(b, src) for src, b in rows], ensure_ascii=False))
        return
    if not rows:
        typer.echo("no bindings: the bot answers nowhere. Add one with "
                   "`geode bindings add PLATFORM CHAT_ID --allow-user ID`.")
    for src, b in rows:
        where = f"{b.team}/{b.channel}" if b.team else b.channel
        tools = "default" if b.tools is None else ",".join(b.tools) or "none"
        users = ",".join(b.allow_users) or "(pairing only)"
        mention = "yes" if b.require_mention else "no"
        typer.echo(f"{b.platform:9} {where:24} [{src}] mention={mention}"
                   f" users={users} tools={tools} busy={b.busy_policy}"
                   + (f" model={b.model}" if b.model else "")
                   + (f" approve={','.join(b.approve)}"
                      f" approvers={','.join(b.approvers) or 'none'}" if b.approve else ""))


def approval_summary(b: BindingSettings) -> str:
    """What needs an approver's yes in this channel and who can give it (one line)."""
    if not b.approve:
        return "needs approval: nothing"
    who = (", ".join(b.approvers) if b.approvers
           else "nobody (no approvers: every such call is denied)")
    return (f"needs approval: {', '.join(b.approve)}; approvers: {who}; "
            f"requests expire after {b.approval_timeout_s:g}s")


# Some platforms' group ids are negative ("-100123"): without this click reads them as
# options.
_NEG_IDS = {"ignore_unknown_options": True}


@bindings_app.command("add", context_settings=_NEG_IDS)
def bindings_add(
    platform: Annotated[str, typer.Argument(help=_PLATFORM_HELP)],
    channel: Annotated[str, typer.Argument(help="Exact channel / chat id (may be negative).")],
    team: Annotated[
        str, typer.Option("--team", help="The platform's team this binding is limited to "
                                         "(its workspace, server or bot id).")
    ] = "",
    workspace: Annotated[
        str, typer.Option("--workspace", help="Folder its turns work in (default: its own, "
                                              "$GEODE_HOME/workspaces/PLATFORM-CHANNEL).")
    ] = "",
    allow_user: Annotated[
        list[str] | None, typer.Option("--allow-user", help="Allowed sender id (repeatable).")
    ] = None,
    tool: Annotated[
        list[str] | None,
        typer.Option("--tool", help="Tool allowed in this channel (repeatable; default: the "
                                    "DAEMON default set)."),
    ] = None,
    no_tools: Annotated[bool, typer.Option("--no-tools", help="Allow no tools at all.")] = False,
    approve: Annotated[
        list[str] | None,
        typer.Option("--approve", help="Tool that runs only after an approver says yes in the "
                                       "thread (repeatable; run_bash only this way)."),
    ] = None,
    approver: Annotated[
        list[str] | None,
        typer.Option("--approver", help="Platform user id who may approve (repeatable)."),
    ] = None,
    approval_timeout: Annotated[
        float, typer.Option("--approval-timeout", min=1.0,
                            help="Seconds an approval request waits before it is denied.")
    ] = 300.0,
    require_mention: Annotated[
        bool, typer.Option("--require-mention/--no-require-mention",
                           help="Answer only when mentioned (follow-ups in a thread excepted).")
    ] = True,
    model: Annotated[str | None, typer.Option("--model", help="Model for this channel.")] = None,
    system_prompt: Annotated[
        str, typer.Option("--system-prompt", help="Added to the system prompt here.")
    ] = "",
    time_budget: Annotated[
        float | None, typer.Option("--time-budget", min=1.0, help="Seconds per turn.")
    ] = None,
    busy_policy: Annotated[
        str, typer.Option("--busy-policy", help="queue (default) or interrupt.")
    ] = "queue",
) -> None:
    """Bind a channel (stored; a running `geode serve` picks it up within seconds)."""
    from bots.bindings import parse_binding
    from bots.store import StoredBindings
    from geode.errors import ConfigError
    from geode.platforms import platform_names

    if platform not in platform_names():
        raise ConfigError(f"unknown platform {platform!r}; use one of "
                          f"{', '.join(platform_names())}")
    data: dict[str, Any] = {
        "platform": platform, "channel": channel, "team": team,
        "workspace": workspace, "allow_users": list(allow_user or ()),
        "require_mention": require_mention,
        "model": model, "system_prompt": system_prompt, "time_budget_s": time_budget,
        "busy_policy": busy_policy, "approve": list(approve or ()),
        "approvers": list(approver or ()), "approval_timeout_s": approval_timeout,
    }
    if no_tools:
        data["tools"] = []
    elif tool:
        data["tools"] = list(tool)
    binding = parse_binding(data)
    settings = _settings()
    from geode.cli._common import check_binding

    check_binding(binding, settings)
    for b in settings.bindings:
        if (b.platform, b.channel) == (platform, channel) and b.team in ("", team):
            raise ConfigError(f"{platform} channel {channel} is bound in config.toml already; "
                              "edit it there.")

    from bots.workspaces import check_workspaces

    async def main() -> None:
        async with await _open(settings) as store:
            stored = StoredBindings(store=store)
            # a new binding may not reach into another's files unless both name the folder
            check_workspaces(settings.home, [*settings.bindings, *await stored.list(), binding])
            await stored.add(binding)

    asyncio.run(main())
    who = ", ".join(binding.allow_users) or "nobody yet (senders pair with a code)"
    typer.echo(f"bound {platform} {channel}; allowed senders: {who}")
    if binding.approve:
        typer.echo(approval_summary(binding))


@bindings_app.command("remove", context_settings=_NEG_IDS)
def bindings_remove(
    platform: Annotated[str, typer.Argument(help=_PLATFORM_HELP)],
    channel: Annotated[str, typer.Argument(help="The channel id.")],
    team: Annotated[str, typer.Option("--team", help="As given to `add`.")] = "",
) -> None:
    """Remove a stored binding (config.toml bindings are removed from the file)."""
    from bots.store import StoredBindings

    settings = _settings()

    async def main() -> bool:
        async with await _open(settings) as store:
            return await StoredBindings(store=store).remove(platform, channel, team)

    if not asyncio.run(main()):
        in_config = any((b.platform, b.channel) == (platform, channel)
                        for b in settings.bindings)
        hint = ("it is in config.toml: remove it there" if in_config
                else "`geode bindings list` shows them")
        typer.echo(f"error: no stored binding for {platform} {channel}; {hint}", err=True)
        raise typer.Exit(2)
    typer.echo(f"removed {platform} {channel}")


@bindings_app.command("sync-commands")
def bindings_sync_commands(
    platform: Annotated[str, typer.Option(
        "--platform", help="A platform that registers commands (default: the one that does).")
    ] = "",
    guild: Annotated[list[str] | None, typer.Option(
        "--guild", help="Guild / team id (repeatable); default: those of bound channels.")
    ] = None,
) -> None:
    """Register the thread commands as slash commands per guild now (serve also does at start)."""
    from bots.platforms import platform_specs, resolve
    from bots.store import StoredBindings
    from geode.cli._common import load_typed
    from geode.errors import ConfigError

    syncing = {n: s.sync_commands for n, s in platform_specs().items() if s.sync_commands}
    if not platform and len(syncing) == 1:
        (platform,) = syncing
    if platform not in syncing:
        raise ConfigError(f"sync-commands supports --platform {' | '.join(sorted(syncing))}, "
                          f"not {platform!r}.")
    sync = resolve(syncing[platform])
    settings, secrets = load_typed()

    async def main() -> list[str]:
        async with await _open(settings) as store:
            stored = await StoredBindings(store=store).list()
        channels = [b.channel for b in stored if b.platform == platform]
        lines: list[str] = await sync(settings, secrets, guild or (), extra_channels=channels)
        return lines

    for line in asyncio.run(main()):
        typer.echo(line)


# -- geode pairing -------------------------------------------------------------------------------


def _when(ts: int | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@pairing_app.command("list")
def pairing_list(
    status: Annotated[
        str | None, typer.Option("--status", help="pending | approved (default: all).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List pairing codes, newest first (expired pending ones are marked)."""
    import time
    from dataclasses import asdict

    from bots.store import PairingStore

    settings = _settings()

    async def main() -> list[Any]:
        async with await _open(settings) as store:
            return await PairingStore(store=store).list(status=status)

    records = asyncio.run(main())
    now = int(time.time())
    if json_out:
        typer.echo(json.dumps(
            [{**asdict(r), "expired": r.status == "pending" and r.expires_at <= now}
             for r in records], ensure_ascii=False))
        return
    if not records:
        typer.echo("no pairing codes")
    for r in records:
        state = "expired" if r.status == "pending" and r.expires_at <= now else r.status
        who = f"{r.sender} ({r.sender_name})" if r.sender_name else r.sender
        typer.echo(f"{r.code}  {state:8}  {r.platform:9} sender {who}  chat {r.channel}  "
                   f"issued {_when(r.issued_at)}")


@pairing_app.command("approve")
def pairing_approve(code: Annotated[str, typer.Argument(help="The code the sender got.")]) -> None:
    """Allow the sender who received CODE (on that platform, in every bound channel)."""
    from bots.store import PairingStore

    settings = _settings()

    async def main() -> Any:
        async with await _open(settings) as store:
            return await PairingStore(store=store).approve(code)

    record = asyncio.run(main())  # ConfigError (unknown / expired) -> exit 2 in main()
    who = f"{record.sender} ({record.sender_name})" if record.sender_name else record.sender
    typer.echo(f"approved {record.platform} sender {who}")
