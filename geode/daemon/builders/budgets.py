"""What bounds a session's turns: the loop's limits (rounds, time, cost, the model's window
and how much of it a tool result may take) and the spend caps on the usage ledger."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from geode.daemon.spend import SpendControl, SpendIdentity, usage_status_lines
from geode.errors import ConfigError
from geode.loop import LoopLimits
from geode.loop.compaction import CHARS_PER_TOKEN as RESULT_CHARS_PER_TOKEN
from geode.policy import MODE_POLICIES, Mode

if TYPE_CHECKING:
    from geode.daemon.port_values import SessionOverrides
    from geode.hooks import HookSystem
    from geode.providers.catalog import ModelRef
    from geode.settings import Settings, SpendCaps
    from geode.store import Store

__all__ = ["Budgets"]


class Budgets:
    """Builds each session's loop limits and spend control; one per process.

    ``clock``: wall-clock seconds for the spend caps' days (tests move it).
    """

    def __init__(self, *, settings: Settings, clock: Callable[[], float],
                 store: Store | None, observers: HookSystem) -> None:
        self.settings = settings
        self.clock = clock
        self.store = store
        self.observers = observers

    def window(self, ref: ModelRef) -> int:
        """The model's context window: ``[model.windows]`` by id, else the catalog's figure
        (200,000 assumed for models it does not know)."""
        windows = self.settings.model.windows
        return windows.get(ref.id) or windows.get(ref.model) or ref.context_window

    def max_result_chars(self, ref: ModelRef) -> int:
        """Characters a tool result may have and pass whole: ``max_result_share`` of the
        model's window, counted at :data:`RESULT_CHARS_PER_TOKEN`, capped by an explicit
        ``max_result_chars``."""
        loop = self.settings.loop
        by_share = int(self.window(ref) * loop.max_result_share * RESULT_CHARS_PER_TOKEN)
        return min(by_share, loop.max_result_chars) if loop.max_result_chars else by_share

    def limits(self, ref: ModelRef, *, mode: Mode, overrides: SessionOverrides,
               max_rounds: int | None = None, time_budget_s: float | None = None) -> LoopLimits:
        """The turn's limits; a USD cap on a model without a price is a ConfigError."""
        loop = self.settings.loop
        budget = time_budget_s
        for fallback in (overrides.time_budget_s, loop.time_budget_s,
                         MODE_POLICIES[mode].time_budget_s):
            if budget is None:
                budget = fallback
        model = self.settings.model
        price = model.prices.get(ref.id) or model.prices.get(ref.model)
        if price is None and ref.provider != "scripted":
            self._refuse_unpriced(ref, overrides.spend_caps)
        return LoopLimits(
            max_rounds=max_rounds or loop.max_rounds,
            time_budget_s=budget,
            cost_budget_usd=loop.cost_budget_usd,
            price_per_mtok=price,
            context_window=self.window(ref),
            repeated_error_limit=loop.repeated_error_limit,
            max_error_rounds=loop.max_error_rounds,
            repair_budget=loop.repair_budget,
            recovery_limit=loop.recovery_limit,
            max_tokens=min(model.max_tokens, ref.max_output or 8192),
            model_call_deadline_s=model.call_deadline_s,
            waiting_notice_s=model.waiting_notice_s,
        )

    def _refuse_unpriced(self, ref: ModelRef, own: SpendCaps | None) -> None:
        usd = [("[loop] cost_budget_usd", self.settings.loop.cost_budget_usd)] + [
            (f"{where} {name}", getattr(caps, name))
            for where, caps in (("[budgets]", self.settings.budgets), ("the binding's", own))
            if caps is not None for name in ("max_usd_per_day", "max_usd_per_turn")]
        for what, value in usd:
            if value is not None:  # a USD cap cannot count an unpriced model: never guess
                raise ConfigError(
                    f"{what} is set but model {ref.id!r} has no price: add "
                    f'[model.prices] "{ref.id}" = [input_usd_per_mtok, output_usd_per_mtok].'
                )

    def spend(self, *, session_id: str, overrides: SessionOverrides, source: str,
              user: str | None, thread: str | None) -> SpendControl | None:
        """The session's spend caps on the usage ledger (none without a store)."""
        if self.store is None:
            return None
        o = overrides
        identity = SpendIdentity(session_id=session_id, binding=o.spend_scope,
                                 platform=source if o.spend_scope else "", user=user or "",
                                 thread=thread or session_id)
        return SpendControl(ledger=self.store.usage, identity=identity,
                            budgets=self.settings.budgets, binding_caps=o.spend_caps,
                            clock=self.clock, timeline=self.store.timeline,
                            observer=self.observers)

    async def usage_status(self, *, scope: str, caps: SpendCaps, thread: str = "",
                           platform: str = "", user: str = "") -> list[str]:
        """Today's usage under ``scope`` (a binding) against its per-day caps (with
        ``thread`` / ``user``: theirs too, see :func:`usage_status_lines`)."""
        if self.store is None:
            return []
        return await usage_status_lines(ledger=self.store.usage, budgets=self.settings.budgets,
                                        binding=scope, caps=caps, now=self.clock(),
                                        thread=thread, platform=platform, user=user)
