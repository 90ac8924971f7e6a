"""Per-binding workspaces: each channel's turns work in its own folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from bots.store import StoredBindings
from bots.workspaces import binding_workspace, check_workspaces, thread_folder
from geode.errors import ConfigError
from geode.providers.base import ModelRequest
from geode.providers.scripted import ScriptedProvider, ToolCall
from geode.settings import BindingSettings
from tests.bots.conftest import CHAT, CHAT2, binding, finals, settled

TOOLS = ["read_file", "write_file"]


def file_tools(request: ModelRequest) -> object:
    """write / read / peek at the other channel's folder, by what the user asked; then
    answer with the tool's result so the test sees it in the reply."""
    last = request.messages[-1]
    results = last.tool_results
    if results:
        return f"result: {results[0].text_content}"
    text = last.text
    if "write" in text:
        return ToolCall("write_file", {"path": "secret.txt", "content": "planted by chat one"})
    if "peek" in text:
        return ToolCall("read_file", {"path": f"../telegram-{CHAT}/secret.txt"})
    return ToolCall("read_file", {"path": "secret.txt"})


async def test_a_write_in_one_binding_is_not_readable_from_another(make_stack, fake, home):
    stack = make_stack(provider=ScriptedProvider([file_tools], repeat_last=True),
                       bindings=[binding(tools=TOOLS), binding(CHAT2, tools=TOOLS)])
    await stack.start()
    fake.user_says(CHAT, "@geode_bot write it", from_user=42)
    await fake.wait_until(lambda: [s for s in fake.sent
                                   if s.plain_text.startswith("result:")], within=10)
    one = home / "workspaces" / f"telegram-{CHAT}"
    assert (one / "secret.txt").read_text() == "planted by chat one"

    fake.user_says(CHAT2, "@geode_bot read it", from_user=42)
    fake.user_says(CHAT2, "@geode_bot peek next door", from_user=42)

    def answers_in_two() -> list[str]:
        return [m.plain_text for m in fake.messages_in(CHAT2, from_bot=True)
                if m.plain_text.startswith("result:")]

    # settled() alone can return before the poller fetched the two messages (nothing recorded
    # yet means nothing unfinished): wait for both answers first, then for the rest to settle
    await fake.wait_until(lambda: len(answers_in_two()) >= 2, within=10)
    await settled(stack)
    answers = answers_in_two()
    assert len(answers) == 2, answers
    assert not any("planted" in a for a in answers), answers
    # the same read in the writing channel does see it (the refusal above is the folder's)
    fake.user_says(CHAT, "@geode_bot read it", from_user=42)
    await fake.wait_until(lambda: finals(fake, "result: planted by chat one"), within=10)
    assert (home / "workspaces" / f"telegram-{CHAT2}").is_dir()
    assert not (home / "workspaces" / f"telegram-{CHAT2}" / "secret.txt").exists()


async def test_bindings_naming_one_workspace_share_it(make_stack, fake, home):
    shared = {"tools": TOOLS, "workspace": "team-files"}
    stack = make_stack(provider=ScriptedProvider([file_tools], repeat_last=True),
                       bindings=[binding(**shared), binding(CHAT2, **shared)])
    await stack.start()
    fake.user_says(CHAT, "@geode_bot write it", from_user=42)
    await fake.wait_until(lambda: [s for s in fake.sent
                                   if s.plain_text.startswith("result:")], within=10)
    assert (home / "workspaces" / "team-files" / "secret.txt").exists()
    fake.user_says(CHAT2, "@geode_bot read it", from_user=42)
    await fake.wait_until(lambda: finals(fake, "result: planted by chat one"), within=10)


def tg(channel: str, **kw: object) -> BindingSettings:
    return BindingSettings(platform="telegram", channel=channel, **kw)  # type: ignore[arg-type]


def test_default_folders_and_overrides(tmp_path: Path) -> None:
    root = (tmp_path / "workspaces").resolve()
    assert binding_workspace(tmp_path, tg("-100123")) == root / "telegram--100123"
    assert binding_workspace(tmp_path, tg("..")) == root / "telegram-_.."  # one name, no parent
    assert binding_workspace(tmp_path, tg("a/../../x")).parent == root
    assert binding_workspace(tmp_path, tg("1", workspace="shared")) == root / "shared"
    assert binding_workspace(tmp_path, tg("1", workspace="/srv/w")) == Path("/srv/w")
    assert thread_folder(root, "../x").parent == root / "threads"


def test_overlapping_workspaces_are_refused_unless_both_name_the_folder(tmp_path: Path) -> None:
    check_workspaces(tmp_path, [tg("1"), tg("2")])
    check_workspaces(tmp_path, [tg("1", workspace="s"), tg("2", workspace="s")])
    with pytest.raises(ConfigError, match="share workspace files"):
        # one names the other's own folder: the other did not agree to share it
        check_workspaces(tmp_path, [tg("1"), tg("2", workspace="telegram-1")])
    with pytest.raises(ConfigError, match="share workspace files"):
        # a folder inside another binding's: the outer channel would read the inner's files
        check_workspaces(tmp_path, [tg("1", workspace="s"), tg("2", workspace="s/inner")])


async def test_a_binding_stored_before_team_existed_keeps_its_team(tmp_path: Path) -> None:
    from bots.store._tables import bindings_table
    from geode.store import open_store

    async with await open_store(f"sqlite:///{tmp_path / 'geode.db'}") as store:
        async with store.write() as conn:
            await conn.execute(bindings_table.insert().values(
                platform="slack", workspace="T1", channel="C1",
                settings={"platform": "slack", "channel": "C1", "workspace": "T1"}))
        [b] = await StoredBindings(store=store).list()
        assert (b.team, b.workspace) == ("T1", "")


def test_bindings_add_refuses_another_bindings_folder_and_keeps_the_team(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import sys

    from typer.testing import CliRunner

    from geode.cli.app import _register, app
    from geode.logging import configure_logging

    _register()
    monkeypatch.setenv("GEODE_HOME", str(home))
    monkeypatch.delenv("GEODE_STORE__URL", raising=False)
    cli = CliRunner()
    try:
        ok = cli.invoke(app, ["bindings", "add", "slack", "C1", "--team", "T1"])
        assert ok.exit_code == 0, ok.output
        bad = cli.invoke(app, ["bindings", "add", "slack", "C2", "--workspace", "slack-C1"])
        # a ConfigError: `geode` turns it into exit 2 with this message
        assert isinstance(bad.exception, ConfigError), bad.output
        assert "share workspace files" in str(bad.exception)
        [b] = json.loads(cli.invoke(app, ["bindings", "list", "--json"]).output)
        assert (b["team"], b["workspace"]) == ("T1", "")
    finally:
        configure_logging(stream=sys.stderr)
