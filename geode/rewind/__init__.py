"""Rewind a session: back to the checkpoint before its last N turns, with the workspace
files those turns changed put back.

* :class:`PreImageRecorder` is the executor's hook that keeps, before an effectful call
  runs, what it may change (file tools: the files' pre-images; ``run_bash``: a snapshot
  of the workspace, diffed after), in a :class:`BlobStore` (``$GEODE_HOME/rewind``);
* :func:`plan_rewind` works out a rewind (turns, files, effects that cannot be undone,
  what refuses it) before anything moves;
* :func:`rewind` runs a plan (intent, files, head: whole or not at all) and
  :func:`finish_pending` finishes one a dead process left.
"""

from __future__ import annotations

from geode.rewind._blobs import BlobStore, CallRecord, PreState
from geode.rewind.apply import RewindResult, finish_all_pending, finish_pending, rewind
from geode.rewind.plan import Irreversible, RewindPlan, TurnRef, finished_turns, plan_rewind
from geode.rewind.recorder import PreImageRecorder

__all__ = [
    "BlobStore",
    "CallRecord",
    "Irreversible",
    "PreImageRecorder",
    "PreState",
    "RewindPlan",
    "RewindResult",
    "TurnRef",
    "finish_all_pending",
    "finish_pending",
    "finished_turns",
    "plan_rewind",
    "rewind",
]
