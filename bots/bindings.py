"""Bindings: which channels are served, and under which DAEMON policy.

A binding matches by exact platform + channel id (and Slack team / Discord guild /
Telegram bot id, ``team``, when the binding names one); there is no wildcard. Unbound
channels are ignored and logged at debug: a bot added to a random group must not answer
there.

Bindings come from ``[[bindings]]`` in config.toml plus those added with
``geode bindings add`` (stored in ``channel_bindings``, :class:`bots.store.StoredBindings`;
re-read every ``refresh_s``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import structlog

from bots.store.bindings import StoredBindings
from geode.daemon.port import SessionOverrides
from geode.errors import ConfigError
from geode.settings import BindingSettings

__all__ = [
    "BindingTable",
    "StoredBindings",
    "approve_actions",
    "parse_binding",
    "session_overrides",
    "spend_scope",
]

log = structlog.get_logger(__name__)


class BindingTable:
    """Exact-match lookup over config bindings + stored ones.

    Config bindings win over a stored binding for the same channel (the operator's file is
    the source of truth; the CLI refuses to add a duplicate of it anyway).
    """

    def __init__(
        self,
        *,
        configured: Sequence[BindingSettings],
        stored: StoredBindings | None = None,
        refresh_s: float = 5.0,
    ) -> None:
        self._configured = list(configured)
        self._stored = stored
        self._refresh_s = refresh_s
        self._loaded_at = float("-inf")
        self._index: dict[tuple[str, str], list[BindingSettings]] = {}
        self._rebuild([])

    def _rebuild(self, stored: list[BindingSettings]) -> None:
        index: dict[tuple[str, str], list[BindingSettings]] = {}
        for b in [*self._configured, *stored]:
            index.setdefault((b.platform, b.channel), []).append(b)
        self._index = index

    async def refresh(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if self._stored is None or (not force and now - self._loaded_at < self._refresh_s):
            return
        self._loaded_at = now
        try:
            self._rebuild(await self._stored.list())
        except Exception:  # the last good table stays in force
            log.warning("bindings.refresh_failed", exc_info=True)

    async def lookup(self, platform: str, workspace: str, channel: str) -> BindingSettings | None:
        """The binding of exactly this channel, or None (ignored, debug-logged)."""
        await self.refresh()
        for b in self._index.get((platform, channel), ()):
            if not b.team or b.team == workspace:
                return b
        log.debug("channel.unbound", platform=platform, workspace=workspace, channel=channel)
        return None

    def channels(self, platform: str) -> list[BindingSettings]:
        return [b for (p, _c), bs in self._index.items() if p == platform for b in bs]


def parse_binding(data: dict[str, Any]) -> BindingSettings:
    """Validate a binding from the CLI; a bad field is a ConfigError naming it."""
    try:
        return BindingSettings.model_validate(data)
    except ValueError as exc:
        raise ConfigError(f"invalid binding: {exc}") from exc


def spend_scope(binding: BindingSettings) -> str:
    """The key a binding's usage and spend caps count under (``platform:channel``)."""
    return f"{binding.platform}:{binding.channel}"


def approve_actions(binding: BindingSettings) -> dict[str, frozenset[str]]:
    """For the tools in the binding's ``approve`` that ask only for some calls: which
    (``computer``: the actions it names; ``memory``: channel writes only, a person's own
    memory is theirs)."""
    actions: dict[str, frozenset[str]] = {}
    if "computer" in binding.approve:
        actions["computer"] = frozenset(binding.approve_computer_actions)
    if "memory" in binding.approve:
        actions["memory"] = frozenset({"scope=channel"})
    return actions


def session_overrides(binding: BindingSettings, *, model: str = "") -> SessionOverrides:
    """A binding's session settings as the harness's neutral overrides (``model``: the
    thread's ``/model`` choice, already checked against the binding's list)."""
    return SessionOverrides(
        model=model or binding.model or None, prompt_addition=binding.system_prompt,
        tools=binding.tools, approve=tuple(binding.approve),
        computer_use=binding.computer_use is True, approve_actions=approve_actions(binding),
        time_budget_s=binding.time_budget_s, spend_caps=binding,
        spend_scope=spend_scope(binding), skills=binding.skills, memory=binding.memory,
    )
