"""While a person answers an approval, the request lends out what it holds.

The approval step (:mod:`geode.executor._approval`) wraps every ``Approver`` call — a
channel's approvers in the thread, the terminal's prompt, a thin CLI's — in
:func:`waiting_for_a_person`. Whoever holds shared capacity for the running request (the
daemon's lanes: its global and kind slots) registers a lender for its context with
:func:`lend_while_waiting`; the executor never names the lanes, and an approver never
touches them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar, Token

__all__ = ["Lender", "lend_while_waiting", "reset_lender", "waiting_for_a_person"]

#: gives the running request's shared slots back for the body and takes them again after
Lender = Callable[[], AbstractAsyncContextManager[None]]

_LENDER: ContextVar[Lender | None] = ContextVar("geode_wait_lender", default=None)


def lend_while_waiting(lender: Lender | None) -> Token[Lender | None]:
    """Set what this context lends while a person answers (reset with the token)."""
    return _LENDER.set(lender)


def reset_lender(token: Token[Lender | None]) -> None:
    _LENDER.reset(token)


@contextlib.asynccontextmanager
async def waiting_for_a_person() -> AsyncIterator[None]:
    """The body waits for a person: what the request holds is lent out meanwhile (nothing,
    outside a lane)."""
    lender = _LENDER.get()
    if lender is None:
        yield
        return
    async with lender():
        yield
