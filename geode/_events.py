"""The one base of GEODE's typed events (the loop's, :mod:`geode.loop.events`; the
executor's and the spend control's, :mod:`geode.hooks.events`; the chat layer defines its
own on it, in ``bots``).

An event is a frozen dataclass with a wire name (:attr:`TypedEvent.kind`, a class constant)
and :attr:`TypedEvent.data` (its fields as a dict): consumers ``match`` on the type;
name-based observers, logs and IPC frames keep seeing ``(kind, data)``.

A neutral leaf module (it imports nothing of GEODE), so both event modules can share it
without ``geode.loop`` and ``geode.hooks`` importing each other's packages.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

__all__ = ["TypedEvent"]


class TypedEvent:
    """Base of the frozen event dataclasses (subclasses set :attr:`kind`)."""

    kind: ClassVar[str]

    @property
    def data(self) -> dict[str, Any]:
        """The event's fields (the IPC frame's ``data``, the name-based observers' view)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
