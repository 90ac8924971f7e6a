"""The claim a fenced write checks first: the neutral fence of a session's writes."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Claim"]


@runtime_checkable
class Claim(Protocol):
    """A hold this process has on something another process may take over (a channel
    thread's lease). A store runs :meth:`check` first inside each write the claim fences,
    in that write's own transaction (``tx``: the store's handle of it, opaque to whoever
    hands the claim in); raising aborts the write. Only the store that made the claim
    knows what checking it means (``bots.store.ThreadLeases.claim``)."""

    def check(self, tx: Any) -> None: ...
