"""The composition root's builders, one per concern; a :class:`~geode.daemon.runtime.Runtime`
holds one of each, and :func:`~geode.daemon.session.open_session` asks them for a session's
parts.

* :mod:`.provider` — model adapters and verify judges (settings and secrets → adapter);
* :mod:`.tools` — a session's scope, its executor with the tools' typed dependencies, its
  plan source;
* :mod:`.checkpointing` — a session's records: created or loaded, its checkpoint chain, the
  tool batch a crash left open;
* :mod:`.hooks` — the operator's hooks and the observers (tracing, evidence ledger);
* :mod:`.budgets` — the loop's limits and the spend caps.
"""

from __future__ import annotations

from geode.daemon.builders.budgets import Budgets
from geode.daemon.builders.checkpointing import Loaded, OpenBatch, Records
from geode.daemon.builders.hooks import build_observers, operator_hooks
from geode.daemon.builders.provider import ProviderBuilder, scripted_ref
from geode.daemon.builders.tools import PlanSource, ToolsBuilder

__all__ = [
    "Budgets",
    "Loaded",
    "OpenBatch",
    "PlanSource",
    "ProviderBuilder",
    "Records",
    "ToolsBuilder",
    "build_observers",
    "operator_hooks",
    "scripted_ref",
]
