"""Check 7 — effect receipts: an effectful call is recorded as intended before dispatch.

``intend`` is written before the handler starts: a crash after it leaves an ``intended``
receipt, which reconciliation sees and nothing re-runs blindly. If ``intend`` cannot be
written, the call does not run.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

import structlog

from geode.executor.protocols import ReceiptStore

__all__ = ["args_hash", "finish_receipt"]

log = structlog.get_logger(__name__)


def args_hash(tool: str, args: dict[str, Any]) -> str:
    """A stable digest of one call's effective tool and arguments (for correlation)."""
    canonical = json.dumps(
        {"tool": tool, "args": args}, sort_keys=True, separators=(",", ":"), default=str
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


async def finish_receipt(
    receipts: ReceiptStore,
    *,
    session_id: str,
    call_id: str,
    status: Literal["done", "failed", "uncertain"],
    detail: str = "",
) -> None:
    """Record the outcome. The effect already happened, so a failure here is logged, not
    raised: the receipt stays ``intended`` and reconciliation treats it as uncertain."""
    try:
        await receipts.finish(
            session_id=session_id, call_id=call_id, status=status, detail=detail[:500]
        )
    except Exception:  # the result must still reach the model
        log.exception("receipt finish failed; left for reconciliation", call_id=call_id,
                      status=status)
