"""Replay recorded sessions against this build; export and fork them.

* :func:`load_recording` / :func:`read_jsonl` -> :class:`Recording` (a session's turns: user
  input, model responses, tool results, the timeline's decisions); :func:`to_jsonl` is
  ``geode sessions export``;
* :func:`replay_all` / :func:`replay_recording` re-run recordings with their recorded model
  responses and report each changed decision (:class:`Difference`), ``geode replay``;
* :func:`fork_session` starts a new session from a checkpoint of another, ``geode sessions
  fork``.
"""

from __future__ import annotations

from geode.replay.decisions import Change, Difference, compare_turn, turn_decisions
from geode.replay.fork import fork_session
from geode.replay.recording import (
    RecordedTurn,
    Recording,
    load_recording,
    read_jsonl,
    to_jsonl,
)
from geode.replay.runner import ReplayPolicy, SessionReplay, replay_all, replay_recording

__all__ = [
    "Change",
    "Difference",
    "RecordedTurn",
    "Recording",
    "ReplayPolicy",
    "SessionReplay",
    "compare_turn",
    "fork_session",
    "load_recording",
    "read_jsonl",
    "replay_all",
    "replay_recording",
    "to_jsonl",
    "turn_decisions",
]
