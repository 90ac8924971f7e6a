"""The daemon layer: the composition root (the runtime, sessions and their builders), lanes,
IPC, scheduler and health of ``geode serve``.

Names are imported on first use (PEP 562): ``geode ask`` needs only the IPC client, and
must not pay for importing the runtime, the store and aiohttp at every start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from geode.daemon.health import HealthServer
    from geode.daemon.ipc import (
        MAX_FRAME,
        DaemonNotRunning,
        HomeLock,
        IPCClient,
        IPCServer,
        ProtocolError,
        RunRequest,
        ShuttingDown,
    )
    from geode.daemon.lanes import LaneBusy, LaneKind, LaneQueue
    from geode.daemon.metrics import DaemonMetrics
    from geode.daemon.port import (
        Admission,
        HarnessPort,
        OpeningNote,
        SessionOverrides,
        SessionStatus,
        TurnOutcome,
        WriteFence,
    )
    from geode.daemon.runtime import Runtime
    from geode.daemon.scheduler import Job, JobStore, Scheduler
    from geode.daemon.serve import Connector, Daemon, ProviderFactory, scripted_factory
    from geode.daemon.session import Session, SessionContext

_EXPORTS: dict[str, str] = {
    "Runtime": "runtime", "Session": "session", "SessionContext": "session",
    "HealthServer": "health",
    "MAX_FRAME": "ipc", "DaemonNotRunning": "ipc", "HomeLock": "ipc", "IPCClient": "ipc",
    "IPCServer": "ipc", "ProtocolError": "ipc", "RunRequest": "ipc", "ShuttingDown": "ipc",
    "LaneBusy": "lanes", "LaneKind": "lanes", "LaneQueue": "lanes",
    "DaemonMetrics": "metrics",
    "Admission": "port", "HarnessPort": "port", "OpeningNote": "port",
    "SessionOverrides": "port", "SessionStatus": "port", "TurnOutcome": "port",
    "WriteFence": "port",
    "Job": "scheduler", "JobStore": "scheduler", "Scheduler": "scheduler",
    "Connector": "serve", "Daemon": "serve", "ProviderFactory": "serve",
    "scripted_factory": "serve",
}

__all__ = [
    "MAX_FRAME",
    "Admission",
    "Connector",
    "Daemon",
    "DaemonMetrics",
    "DaemonNotRunning",
    "HarnessPort",
    "HealthServer",
    "HomeLock",
    "IPCClient",
    "IPCServer",
    "Job",
    "JobStore",
    "LaneBusy",
    "LaneKind",
    "LaneQueue",
    "OpeningNote",
    "ProtocolError",
    "ProviderFactory",
    "RunRequest",
    "Runtime",
    "Scheduler",
    "Session",
    "SessionContext",
    "SessionOverrides",
    "SessionStatus",
    "ShuttingDown",
    "TurnOutcome",
    "WriteFence",
    "scripted_factory",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'geode.daemon' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"geode.daemon.{module}"), name)
    globals()[name] = value
    return value
