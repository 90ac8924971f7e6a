"""The configuration checks ``geode serve`` runs before it starts, as values.

``geode serve`` refuses to start (exit 2) when one fails; ``geode doctor`` runs the very
same function and reports every result, so a config that serve refuses makes doctor say
the same words and exit non-zero (a binding's model id used to pass doctor and fail serve).
What is checked: each configured binding's model id and tool names, the bindings'
workspaces, and each ``[channels.*]`` section (a known platform, its typed options with no
unknown key, the secrets an enabled one needs, its spec's own checks). Platforms come from
the registry (``bots.platforms``, the ``geode.platforms`` entry points); nothing here names
one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from geode.errors import ConfigError

if TYPE_CHECKING:
    from geode.settings import Secrets, Settings

__all__ = ["Check", "CheckStatus", "preflight", "refuse_failed"]

CheckStatus = Literal["ok", "warn", "fail"]


@dataclass(frozen=True, kw_only=True)
class Check:
    """One start check's result: ``name`` says what was checked (``binding PLATFORM
    CHANNEL``, ``channel PLATFORM``), ``message`` what was found (the ConfigError's text when
    it failed), ``fix`` how to fix it."""

    name: str
    status: CheckStatus
    message: str
    fix: str = ""


def preflight(settings: Settings, secrets: Secrets) -> list[Check]:
    """Every start check of ``settings``, in order; none raises."""
    return [*_bindings(settings), _workspaces(settings), *_channels(settings, secrets)]


def refuse_failed(checks: list[Check]) -> None:
    """Raise one ConfigError naming every failed check (``geode serve``: exit 2)."""
    failed = [c.message for c in checks if c.status == "fail"]
    if failed:
        raise ConfigError("\n".join(failed))


def _bindings(settings: Settings) -> list[Check]:
    from geode.cli._common import check_binding

    out = []
    for b in settings.bindings:  # config.toml's; stored ones were checked when added
        name = f"binding {b.platform} {b.channel}"
        try:
            check_binding(b, settings)
        except ConfigError as exc:
            out.append(Check(name=name, status="fail", message=f"{name}: {exc}",
                             fix="fix the [[bindings]] entry in config.toml; `geode models` "
                                 "lists the model ids"))
        else:
            out.append(Check(name=name, status="ok",
                             message=f"{name}: model {b.model or settings.model.default}, "
                                     "tools known"))
    return out


def _workspaces(settings: Settings) -> Check:
    from bots.workspaces import check_workspaces

    try:
        check_workspaces(settings.home, settings.bindings)
    except ConfigError as exc:
        return Check(name="workspaces", status="fail", message=str(exc))
    return Check(name="workspaces", status="ok",
                 message="each binding has its own workspace (or shares one on purpose)")


def _channels(settings: Settings, secrets: Secrets) -> list[Check]:
    from bots.platforms import channel_options, missing_tokens

    out = []
    for platform, raw in settings.channels.items():
        name = f"channel {platform}"
        try:
            options = channel_options(platform, raw)
        except ConfigError as exc:
            out.append(Check(name=name, status="fail", message=str(exc),
                             fix=f"fix [channels.{platform}] in config.toml"))
            continue
        if not options.enabled:
            out.append(Check(name=name, status="ok",
                             message=f"[channels.{platform}]: enabled = false (not started)"))
            continue
        missing = missing_tokens(platform, options, secrets)
        if missing:
            out += [Check(name=name, status="fail", message=m,
                          fix=f"add it to {settings.home / '.env'} (mode 0600)") for m in missing]
            continue
        bound = sum(b.platform == platform for b in settings.bindings)
        out.append(Check(
            name=name, status="ok" if bound else "warn",
            message=f"[channels.{platform}]: options valid, credentials set, "
                    f"{bound} binding(s) in config.toml",
            fix="" if bound else f"add one: geode bindings add {platform} CHANNEL_ID "
                                 "(see `geode bindings add --help`)"))
    return out
