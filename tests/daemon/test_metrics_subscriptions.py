"""The metrics observer is subscribed with ``only=`` its event types: a ``case`` added to
``on_event`` / ``on_loop_event`` without its type in ``EVENTS`` / ``LOOP_EVENTS`` would never
be delivered, and that metric would silently stay at zero. The lists must match the cases."""

from __future__ import annotations

import ast
import inspect
import textwrap

from geode.daemon.metrics import DaemonMetrics


def _case_types(method: object) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))  # type: ignore[arg-type]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.MatchClass) and isinstance(node.cls, ast.Name):
            names.add(node.cls.id)
    return names


def test_each_matched_event_type_is_subscribed() -> None:
    assert _case_types(DaemonMetrics.on_event) == {t.__name__ for t in DaemonMetrics.EVENTS}
    assert _case_types(DaemonMetrics.on_loop_event) == {
        t.__name__ for t in DaemonMetrics.LOOP_EVENTS}
