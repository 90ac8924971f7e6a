"""Rewinding a session by one and by two turns: the workspace files byte-identical to before
those turns (write_file / edit_file from their pre-images, run_bash from its snapshot), the
model's next request without the rewound turns, the effects no rewind undoes listed in the
plan, and nothing deleted (the conversation as it was kept in an archive session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from geode.rewind import BlobStore, plan_rewind, rewind
from geode.store import open_store
from geode.tools.builtin import sandbox_available
from tests.rewind._session import Recorded, next_request, record, settings_for, tree

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="run_bash needs bubblewrap")


async def _rewind(rec: Recorded, turns: int) -> tuple[dict, dict]:
    settings, _ = settings_for(rec.home)
    store = await open_store(settings.store_url)
    blobs = BlobStore(rec.home / "rewind")
    try:
        plan = await plan_rewind(store, blobs, rec.session_id, turns=turns)
        result = await rewind(store, blobs, plan, by="test")
        return plan.to_json(), result.to_json()
    finally:
        await store.aclose()


@pytest.mark.parametrize("turns", [1, 2])
async def test_rewind_puts_the_files_back_and_the_model_forgets(
    tmp_path: Path, turns: int
) -> None:
    rec = await record(tmp_path)
    assert rec.trees[3] != rec.trees[3 - turns]  # the turns did change the workspace

    plan, result = await _rewind(rec, turns)

    assert not plan["blockers"]
    assert [t["number"] for t in plan["turns"]] == list(range(4 - turns, 4))
    # the web call of turn 2 cannot be undone, and is said so before anything runs
    assert [(i["turn"], i["tool"]) for i in plan["irreversible"]] == (
        [(2, "web_fetch")] if turns == 2 else [])
    assert tree(rec.workspace) == rec.trees[3 - turns]  # bytes, modes and directories
    assert result["archive_session_id"]

    seen = await next_request(rec, "what now?")
    prompts = ["user:set things up", "user:build it", "user:polish"]
    kept = prompts[:3 - turns]
    assert [t for t in seen if t.startswith("user:")] == [*kept, "user:what now?"]
    for gone in prompts[3 - turns:]:
        assert gone not in seen


async def test_rewinding_every_turn_and_the_archive_keeps_them(tmp_path: Path) -> None:
    rec = await record(tmp_path)
    _, result = await _rewind(rec, 3)
    assert tree(rec.workspace) == rec.trees[0]
    settings, _ = settings_for(rec.home)
    store = await open_store(settings.store_url)
    try:
        archive = await store.checkpointer(result["archive_session_id"]).load()
        assert archive is not None
        assert [m.text for m in archive.messages if m.role == "user" and m.text] == [
            "set things up", "build it", "polish"]
        record_ = await store.sessions.get(result["archive_session_id"])
        assert record_ is not None and record_.parent_session_id == rec.session_id
        rows = [r for r in await store.timeline.list(rec.session_id)
                if r.kind == "session.rewound"]
        assert len(rows) == 1 and rows[0].payload["by"] == "test"
        assert rows[0].payload["turns"] == [1, 2, 3]
    finally:
        await store.aclose()
    seen = await next_request(rec, "fresh start")
    assert [t for t in seen if t.startswith("user:")] == ["user:fresh start"]


async def test_rewind_after_rewind_counts_only_the_turns_left(tmp_path: Path) -> None:
    rec = await record(tmp_path)
    await _rewind(rec, 1)
    plan, _ = await _rewind(rec, 1)
    assert [t["number"] for t in plan["turns"]] == [2]
    assert tree(rec.workspace) == rec.trees[1]


async def test_fork_export_and_replay_see_the_session_as_rewound(tmp_path: Path) -> None:
    from geode.replay import fork_session, load_recording

    rec = await record(tmp_path)
    await _rewind(rec, 2)
    await next_request(rec, "and then?")
    settings, _ = settings_for(rec.home)
    store = await open_store(settings.store_url)
    try:
        recording = await load_recording(store, rec.session_id)
        assert [t.input for t in recording.turns] == ["set things up", "and then?"]
        fork = await fork_session(store, rec.session_id, at="1")
        forked = await store.checkpointer(fork.session_id).load()
        assert forked is not None
        assert [m.text for m in forked.messages if m.role == "user" and m.text] == [
            "set things up"]
        with pytest.raises(Exception, match="1 to 2"):
            await fork_session(store, rec.session_id, at="3")
    finally:
        await store.aclose()
