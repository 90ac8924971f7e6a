"""Hooks and observers of a process.

Decision hooks (:class:`~geode.hooks.HookRegistry`) are the operator's: Python plugins
registered as entry points and shell commands from ``[hooks]``. Observers
(:class:`~geode.hooks.HookSystem`) receive every lifecycle event and decide nothing:
OpenTelemetry tracing when it is installed and configured, and, with a store, the evidence
ledger's redacted JSONL rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geode.hooks import HookRegistry, HookSystem, load_entry_point_hooks, load_shell_hooks

if TYPE_CHECKING:
    from geode.settings import Settings
    from geode.store.ledger import EvidenceLedger

__all__ = ["build_observers", "operator_hooks"]


def operator_hooks(settings: Settings) -> HookRegistry:
    """The operator's decision hooks: entry-point plugins, then ``[hooks]`` shell commands."""
    hooks = HookRegistry()
    load_entry_point_hooks(hooks)
    load_shell_hooks(hooks, {k: [h.model_dump() for h in v] for k, v in settings.hooks.items()})
    return hooks


def build_observers(
    settings: Settings, *, observers: HookSystem | None = None, ledger: bool
) -> tuple[HookSystem, EvidenceLedger | None]:
    """``observers`` (a new one if None) with tracing attached and, when ``ledger``, the
    evidence ledger under ``$GEODE_HOME/ledger/`` subscribed; the ledger is returned too
    (its retention is pruned with the store's)."""
    from geode.daemon.tracing import attach_tracing

    system = observers or HookSystem()
    attach_tracing(system)  # OpenTelemetry, when installed and configured
    if not ledger:
        return system, None
    from geode.daemon.evidence import LedgerObserver
    from geode.store.ledger import EvidenceLedger

    evidence = EvidenceLedger(settings.home)
    LedgerObserver(evidence).attach(system)
    return system, evidence
