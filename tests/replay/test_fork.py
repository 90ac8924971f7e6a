"""`geode sessions fork ID [--at TURN]`: a new session from a turn's checkpoint, its lineage
recorded, continued like any session (``geode run --session NEW``'s code path)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geode.cli import cmd_sessions  # noqa: F401 - registers its commands
from geode.cli.app import app
from geode.daemon.runtime import Runtime
from geode.daemon.session import SessionContext
from geode.logging import configure_logging
from geode.providers.scripted import ScriptedProvider
from geode.settings import load_settings
from geode.store import open_store
from tests.replay.conftest import Recorded


@pytest.fixture
def cli(one_of_each: Recorded, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    monkeypatch.setenv("GEODE_HOME", str(one_of_each.home))
    monkeypatch.delenv("GEODE_STORE__URL", raising=False)
    yield CliRunner()
    configure_logging(stream=sys.stderr)


def _notes(rec: Recorded) -> str:
    return next(r.session_id for r in rec.recordings
                if r.workspace and r.workspace.endswith("-notes"))


def test_fork_at_the_first_turn_then_run(cli: CliRunner, one_of_each: Recorded) -> None:
    sid = _notes(one_of_each)
    done = cli.invoke(app, ["sessions", "fork", sid, "--at", "1"])
    assert done.exit_code == 0, done.output
    new = done.stdout.strip()
    assert new and new != sid
    shown = json.loads(cli.invoke(app, ["sessions", "show", new, "--json"]).stdout)
    assert shown["parent_session_id"] == sid

    asyncio.run(_continue(one_of_each.home, sid, new))


async def _continue(home: Path, sid: str, new: str) -> None:
    settings, secrets = load_settings(cwd=home, env={"GEODE_HOME": str(home)})
    store = await open_store(settings.store_url)
    model = ScriptedProvider(["the note is still there"])
    async with Runtime(settings=settings, secrets=secrets, store=store) as runtime:
        record = await store.sessions.get(new)
        assert record is not None and record.metadata["forked_from"]["turn"] == 1
        # what `geode run --session NEW` does: open the session by its id and run a turn
        session = await runtime.open_session(SessionContext(
            mode="HEADLESS", workspace=Path(record.metadata["workspace"]), session_id=new,
            provider=model))
        result = await session.run("and now?")
        assert result.ok
        # the model saw turn 1 and the new prompt; turn 2 of the original is not in it
        texts = [m.text for m in model.calls[0].messages if m.role == "user" and m.text]
        assert texts == ["keep a note", "and now?"]
        original = await store.checkpointer(sid).load()
        assert original is not None
        assert [m.text for m in original.messages if m.role == "user" and m.text] == [
            "keep a note", "what does it say?"]
        forked = [r.kind for r in await store.timeline.list(new)]
        assert forked[0] == "session.forked" and "turn.finished" in forked


def test_fork_defaults_to_the_latest_turn(cli: CliRunner, one_of_each: Recorded) -> None:
    sid = _notes(one_of_each)
    done = cli.invoke(app, ["sessions", "fork", sid])
    assert done.exit_code == 0, done.output
    new = done.stdout.strip()
    transcript = cli.invoke(app, ["sessions", "transcript", new, "--json"])
    assert transcript.exit_code == 0
    assert "what does it say?" in transcript.stdout


@pytest.mark.parametrize("at", ["3", "0", "t-no-such-turn"])
def test_fork_at_a_turn_it_does_not_have_is_exit_2(
    cli: CliRunner, one_of_each: Recorded, at: str
) -> None:
    done = cli.invoke(app, ["sessions", "fork", _notes(one_of_each), "--at", at])
    assert done.exit_code == 2
    assert "2 finished turn(s)" in done.output


def test_fork_of_an_unknown_session_is_exit_2(cli: CliRunner) -> None:
    assert cli.invoke(app, ["sessions", "fork", "nope"]).exit_code == 2


async def test_a_compacted_chain_forks_and_replays_only_what_it_still_holds(
    tmp_path: Path,
) -> None:
    from geode.errors import ConfigError
    from geode.replay import fork_session, load_recording
    from tests.replay._sessions import record

    home = tmp_path / "home"
    home.mkdir()
    (sid,) = await record(home, 1)  # the first scenario: two turns
    settings, _ = load_settings(cwd=home, env={"GEODE_HOME": str(home)})
    store = await open_store(settings.store_url)
    try:
        assert len((await load_recording(store, sid)).turns) == 2
        chain = store.checkpointer(sid)
        restored = await chain.load()
        assert restored is not None
        # what compaction leaves: fewer messages than before (a summary in their place)
        await chain.save(messages=restored.messages[-2:], state=restored.state,
                         status="active")
        with pytest.raises(ConfigError, match="compacted after turn 1"):
            await fork_session(store, sid, at="1")
        assert (await load_recording(store, sid)).turns == ()
    finally:
        await store.aclose()
