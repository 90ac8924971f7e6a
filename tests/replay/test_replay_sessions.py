"""Replay of recorded sessions through the real session factory: no difference on this
build; a policy that denies write_file reports exactly the steps that used it; a broken
check is caught; the replay never touches the recorded workspace or the world."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import pytest

from geode.executor.decisions import Allow
from geode.replay import Recording, ReplayPolicy, SessionReplay, replay_all
from geode.settings import load_settings
from tests.replay._sessions import LOOKUPS, record, scenarios
from tests.replay.conftest import SESSIONS, Recorded


def _settings(home: Path) -> tuple[Any, Any]:
    return load_settings(cwd=home, env={"GEODE_HOME": str(home)})


async def _replay(recorded: Recorded, policy: ReplayPolicy | None = None,
                  recordings: list[Recording] | None = None) -> list[SessionReplay]:
    settings, secrets = _settings(recorded.home)
    return await replay_all(recordings or recorded.recordings, settings=settings,
                            secrets=secrets, policy=policy or ReplayPolicy())


def _calls(recordings: list[Recording], tool: str) -> set[tuple[str, str]]:
    """(session, step) of every recorded call of ``tool``."""
    return {(r.session_id, f"call {use.id}") for r in recordings for t in r.turns
            for m in t.responses for use in m.tool_uses if use.name == tool}


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_recordings_hold_every_turn_response_and_result(recorded: Recorded) -> None:
    assert len(recorded.recordings) == SESSIONS
    notes = next(r for r in recorded.recordings if r.workspace and "notes" in r.workspace)
    assert [t.input for t in notes.turns] == ["keep a note", "what does it say?"]
    assert [len(t.responses) for t in notes.turns] == [2, 2]
    first = notes.turns[0]
    (call_id,) = first.results
    assert first.results[call_id].outcome == "ok"
    kinds = [r["kind"] for r in first.rows]
    assert {"tool.proposed", "tool.started", "tool.finished", "turn.finished"} <= set(kinds)
    assert notes.policy == {"allow_tools": ["edit_file", "write_file"]}


async def test_replaying_the_recorded_sessions_finds_no_difference(
    recorded: Recorded,
) -> None:
    before = {ws: _tree(ws) for ws in recorded.home.glob("ws-*")}
    lookups = len(LOOKUPS)
    results = await _replay(recorded)
    assert [r.session_id for r in results] == recorded.ids
    assert [d for r in results for d in r.differences] == []
    assert sum(r.turns for r in results) == sum(len(r.turns) for r in recorded.recordings)
    # the tools ran on throwaway copies: the recorded workspaces are as they were
    assert {ws: _tree(ws) for ws in recorded.home.glob("ws-*")} == before
    # the MCP tool's calls were answered from their recorded results, never made again
    assert _calls(recorded.recordings, "docs__lookup")
    assert len(LOOKUPS) == lookups


async def test_denying_write_file_reports_exactly_the_steps_that_used_it(
    recorded: Recorded,
) -> None:
    results = await _replay(recorded, ReplayPolicy(deny_tools=("write_file",)))
    differences = [d for r in results for d in r.differences]
    writes = _calls(recorded.recordings, "write_file")
    assert len(writes) >= SESSIONS // 2
    assert {(d.session_id, d.step) for d in differences} == writes
    for d in differences:
        changed = {c.field: c for c in d.changes}
        assert d.tool == "write_file"
        assert changed["decision"].replayed == "denied by scope"
        assert changed["offered"].replayed == "no"


async def test_a_broken_policy_check_is_caught(
    recorded: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a regression in check 3: every call allowed, whatever its safety level
    monkeypatch.setattr("geode.executor.executor.check_policy",
                        lambda tool, *, scope, args=None: Allow())
    chosen = [r for r in recorded.recordings if r.mode == "DAEMON" or any(
        u.id.startswith("toolu_denied_w") for t in r.turns for m in t.responses
        for u in m.tool_uses)]
    results = await _replay(recorded, recordings=chosen)
    differences = [d for r in results for d in r.differences]
    steps = {(d.session_id, d.step) for d in differences}
    # the HEADLESS write nobody allowed, and the channel's approvals, all decided otherwise
    denied = {(r.session_id, f"call {use.id}") for r in recorded.recordings
              for t in r.turns for m in t.responses for use in m.tool_uses
              if use.id.startswith(("toolu_denied_w", "toolu_chan_w"))}
    assert denied and denied <= steps
    by_step = {(d.session_id, d.step): {c.field: c for c in d.changes} for d in differences}
    for key in denied:
        assert "decision" in by_step[key] or "approval" in by_step[key]


async def test_a_broken_schema_check_is_caught(
    recorded: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a regression in check 4: arguments no longer validated
    monkeypatch.setattr("geode.executor.executor.check_schema", lambda tool, args: None)
    denied = [r for r in recorded.recordings if any(
        u.id.startswith("toolu_denied_r") for t in r.turns for m in t.responses
        for u in m.tool_uses)]
    results = await _replay(recorded, recordings=denied)
    changes = {(d.step.split("_")[1], c.field): (c.recorded, c.replayed)
               for r in results for d in r.differences for c in d.changes}
    assert changes[("denied", "decision")] == ("denied by schema", "allowed")


async def test_a_turn_whose_timeline_was_pruned_is_replayed_not_compared(
    recorded: Recorded,
) -> None:
    notes = next(r for r in recorded.recordings if r.workspace and r.workspace.endswith("-notes"))
    pruned = dataclasses.replace(notes, turns=(
        dataclasses.replace(notes.turns[0], rows=()), *notes.turns[1:]))
    (result,) = await _replay(recorded, ReplayPolicy(deny_tools=("write_file",)),
                              recordings=[pruned])
    assert result.differences == ()
    assert any("turn 1" in n and "not compared" in n for n in result.notes)


async def test_sessions_recorded_in_postgresql_replay_and_fork(
    pg_store_url: str, tmp_path: Path
) -> None:
    from geode.replay import fork_session, load_recording
    from geode.store import open_store

    home = tmp_path / "home"
    home.mkdir()
    ids = await record(home, len(scenarios()), store_url=pg_store_url)
    store = await open_store(pg_store_url)
    try:
        recordings = [await load_recording(store, sid) for sid in ids]
        fork = await fork_session(store, ids[0], at="1")
        forked = await store.sessions.get(fork.session_id)
        assert forked is not None and forked.parent_session_id == ids[0]
    finally:
        await store.aclose()
    assert [len(r.turns) for r in recordings] == [len(sc.turns) for sc in scenarios()]
    settings, secrets = _settings(home)
    results = await replay_all(recordings, settings=settings, secrets=secrets)
    assert [d for r in results for d in r.differences] == []
