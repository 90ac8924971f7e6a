"""The tool boundary: every proposed call is checked, recorded, locked and run in one place.

See :mod:`geode.executor.executor` for the order of checks and the invariants.
"""

from geode.executor._locks import ResourceLocks
from geode.executor._middleware import RequestMiddleware
from geode.executor.decisions import (
    DENIAL_PREFIX,
    Allow,
    ApprovalAnswer,
    ApprovalRequest,
    Ask,
    CheckName,
    Deny,
    ToolCall,
    Verdict,
)
from geode.executor.executor import ToolExecutor
from geode.executor.protocols import (
    Approver,
    MemoryReceiptStore,
    MemoryResults,
    MemoryTimeline,
    ReceiptRecord,
    ReceiptStore,
    ResultKeeper,
    TimelineEntry,
    TimelineSink,
)
from geode.executor.verify import HookVerifier, VerifyCheck, non_empty_answer

__all__ = [
    "DENIAL_PREFIX",
    "Allow",
    "ApprovalAnswer",
    "ApprovalRequest",
    "Approver",
    "Ask",
    "CheckName",
    "Deny",
    "HookVerifier",
    "MemoryReceiptStore",
    "MemoryResults",
    "MemoryTimeline",
    "ReceiptRecord",
    "ReceiptStore",
    "RequestMiddleware",
    "ResourceLocks",
    "ResultKeeper",
    "TimelineEntry",
    "TimelineSink",
    "ToolCall",
    "ToolExecutor",
    "Verdict",
    "VerifyCheck",
    "non_empty_answer",
]
