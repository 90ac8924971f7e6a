"""The chat layer's checks for ``geode serve`` / ``geode doctor``, and its ``geode init`` lines.

:func:`preflight` is part of the start checks (``geode.cli.preflight``): ``geode serve``
refuses to start when one fails, ``geode doctor`` reports the same results in the same words.
It checks the bindings' workspaces and each ``[channels.*]`` section (a known platform, its
typed options with no unknown key, the secrets an enabled one needs, its spec's own checks).
Platforms come from the registry (:mod:`bots.platforms`); nothing here names one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geode.cli.preflight import Check
from geode.errors import ConfigError

if TYPE_CHECKING:
    from geode.settings import Secrets, Settings

__all__ = ["doctor", "env_lines", "preflight"]


def preflight(settings: Settings, secrets: Secrets) -> list[Check]:
    """The bindings' workspaces, then each ``[channels.*]`` section; none raises."""
    return [_workspaces(settings), *_channels(settings, secrets)]


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


async def doctor(settings: Settings) -> list[Check]:
    """Per binding (config.toml's and stored ones): what runs freely, what needs an
    approver's yes, and who can give it; a warning where nobody can."""
    from bots.cli.channels import approval_summary
    from bots.store import StoredBindings
    from geode.store import open_store

    rows = [("config", b) for b in settings.bindings]
    try:
        async with await open_store(settings.store_url) as store:
            rows += [("store", b) for b in await StoredBindings(store=store).list()]
    except Exception:  # doctor's store check reported it already
        pass
    out = []
    for src, b in rows:
        free = ("read-only tools (DAEMON default)" if b.tools is None
                else ", ".join(b.tools) or "no tools")
        where = f"{b.team}/{b.channel}" if b.team else b.channel
        nobody = bool(b.approve) and not b.approvers
        out.append(Check(
            name="bindings", status="warn" if nobody else "ok",
            message=f"binding {b.platform} {where} [{src}]: runs freely: {free}; "
                    f"{approval_summary(b)}",
            fix='give the binding approvers = ["USER_ID", ...] (or remove its approve list)'
            if nobody else ""))
    return out


def env_lines() -> list[str]:
    """Each registered platform's lines for a new ``.env`` (its spec's ``env_lines``)."""
    from bots.platforms import platform_specs

    return [line for spec in platform_specs().values() for line in spec.env_lines]
