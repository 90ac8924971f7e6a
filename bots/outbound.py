"""Moved: delivery of outbox rows is the deliver phase's, :class:`bots.turn.deliver.Deliverer`.
The name stays importable from here until every importer uses :mod:`bots.turn`."""

from __future__ import annotations

from bots.turn.deliver import Deliverer

__all__ = ["Deliverer"]
