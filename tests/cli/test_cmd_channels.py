"""`geode bindings` and `geode pairing` through typer's CliRunner, on a real store."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bots.bindings import BindingTable
from bots.store import PairingStore, StoredBindings
from geode.cli.app import _register, app
from geode.errors import ConfigError
from geode.logging import configure_logging
from geode.store import open_store

_register()


@pytest.fixture
def cli(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    monkeypatch.setenv("GEODE_HOME", str(home))
    monkeypatch.delenv("GEODE_STORE__URL", raising=False)
    yield CliRunner()
    configure_logging(stream=sys.stderr)  # the commands logged onto CliRunner's closed stderr


def _store_url(home: Path) -> str:
    return f"sqlite:///{home / 'geode.db'}"


def test_bindings_add_list_remove(cli: CliRunner, home: Path) -> None:
    assert "no bindings" in cli.invoke(app, ["bindings", "list"]).output
    added = cli.invoke(app, ["bindings", "add", "telegram", "-100777", "--allow-user", "42",
                             "--allow-user", "43", "--tool", "read_file",
                             "--no-require-mention", "--busy-policy", "interrupt"])
    assert added.exit_code == 0, added.output
    assert "bound telegram -100777" in added.output

    listed = json.loads(cli.invoke(app, ["bindings", "list", "--json"]).output)
    assert len(listed) == 1
    b = listed[0]
    assert (b["source"], b["platform"], b["channel"], b["allow_users"], b["tools"],
            b["require_mention"], b["busy_policy"]) == (
        "store", "telegram", "-100777", ["42", "43"], ["read_file"], False, "interrupt")

    # the layer's lookup sees the stored binding exactly as added
    async def lookup() -> object:
        async with await open_store(_store_url(home)) as store:
            table = BindingTable(configured=[], stored=StoredBindings(store=store))
            return await table.lookup("telegram", "123", "-100777")

    found = asyncio.run(lookup())
    assert found is not None and found.tools == ["read_file"]  # type: ignore[attr-defined]

    dup = cli.invoke(app, ["bindings", "add", "telegram", "-100777"])
    assert isinstance(dup.exception, ConfigError) and "bound already" in str(dup.exception)

    assert cli.invoke(app, ["bindings", "remove", "telegram", "-100777"]).exit_code == 0
    again = cli.invoke(app, ["bindings", "remove", "telegram", "-100777"])
    assert again.exit_code == 2 and "no stored binding" in again.output
    assert json.loads(cli.invoke(app, ["bindings", "list", "--json"]).output) == []


def test_bindings_add_validates_and_respects_config(cli: CliRunner, home: Path) -> None:
    bad = cli.invoke(app, ["bindings", "add", "irc", "#x"])
    assert isinstance(bad.exception, ConfigError) and "unknown platform" in str(bad.exception)
    bad = cli.invoke(app, ["bindings", "add", "telegram", "-1", "--busy-policy", "panic"])
    assert isinstance(bad.exception, ConfigError) and "busy_policy" in str(bad.exception)

    (home / "config.toml").write_text(
        '[[bindings]]\nplatform = "telegram"\nchannel = "-100123"\nallow_users = ["42"]\n'
    )
    listed = json.loads(cli.invoke(app, ["bindings", "list", "--json"]).output)
    assert [(b["source"], b["channel"]) for b in listed] == [("config", "-100123")]
    clash = cli.invoke(app, ["bindings", "add", "telegram", "-100123"])
    assert isinstance(clash.exception, ConfigError) and "config.toml" in str(clash.exception)
    gone = cli.invoke(app, ["bindings", "remove", "telegram", "-100123"])
    assert gone.exit_code == 2 and "config.toml" in gone.output
    no_tools = cli.invoke(app, ["bindings", "add", "telegram", "-5", "--no-tools"])
    assert no_tools.exit_code == 0, no_tools.output
    listed = json.loads(cli.invoke(app, ["bindings", "list", "--json"]).output)
    assert [b["tools"] for b in listed if b["channel"] == "-5"] == [[]]


def test_bindings_add_takes_the_approval_keys(cli: CliRunner, home: Path) -> None:
    added = cli.invoke(app, ["bindings", "add", "telegram", "-100888", "--tool", "read_file",
                             "--approve", "write_file", "--approve", "run_bash",
                             "--approver", "42", "--approval-timeout", "60"])
    assert added.exit_code == 0, added.output
    assert "needs approval: write_file, run_bash; approvers: 42; requests expire after 60s" \
        in added.output
    (b,) = json.loads(cli.invoke(app, ["bindings", "list", "--json"]).output)
    assert (b["approve"], b["approvers"], b["approval_timeout_s"]) == (
        ["write_file", "run_bash"], ["42"], 60)
    assert "approve=write_file,run_bash approvers=42" in cli.invoke(
        app, ["bindings", "list"]).output

    # run_bash never runs unasked for a whole channel; a typo in approve is caught
    bash = cli.invoke(app, ["bindings", "add", "telegram", "-1", "--tool", "run_bash"])
    assert isinstance(bash.exception, ConfigError)
    assert "list it in `approve`" in str(bash.exception)
    typo = cli.invoke(app, ["bindings", "add", "telegram", "-2", "--approve", "write_fiel"])
    assert isinstance(typo.exception, ConfigError)
    assert "approve: unknown tool 'write_fiel'" in str(typo.exception)
    assert "write_file" in str(typo.exception)
    nobody = cli.invoke(app, ["bindings", "add", "telegram", "-3", "--approve", "write_file"])
    assert nobody.exit_code == 0 and "approvers: nobody" in nobody.output


def test_pairing_list_and_approve(cli: CliRunner, home: Path) -> None:
    async def issue() -> tuple[str, str]:
        async with await open_store(_store_url(home)) as store:
            pairing = PairingStore(store=store)
            fresh = await pairing.issue(platform="telegram", sender="99", sender_name="Eve",
                                        channel="-100123")
            old = await pairing.issue(platform="telegram", sender="98", sender_name="",
                                      channel="-100123", now=int(time.time()) - 7200)
            assert fresh and old
            return fresh, old

    code, expired = asyncio.run(issue())
    listed = json.loads(cli.invoke(app, ["pairing", "list", "--json"]).output)
    assert {(r["code"], r["status"], r["expired"]) for r in listed} == {
        (code, "pending", False), (expired, "pending", True)}
    text = cli.invoke(app, ["pairing", "list"]).output
    assert f"{code}  pending" in text and f"{expired}  expired" in text

    done = cli.invoke(app, ["pairing", "approve", code.lower()])  # codes are case-insensitive
    assert done.exit_code == 0, done.output
    assert "approved telegram sender 99 (Eve)" in done.output
    late = cli.invoke(app, ["pairing", "approve", expired])
    assert isinstance(late.exception, ConfigError) and "expired" in str(late.exception)
    unknown = cli.invoke(app, ["pairing", "approve", "NOPE2345"])
    assert isinstance(unknown.exception, ConfigError) and "no pairing code" in str(
        unknown.exception)
    approved = json.loads(cli.invoke(app, ["pairing", "list", "--status", "approved",
                                           "--json"]).output)
    assert [r["sender"] for r in approved] == ["99"]

    async def allowed() -> tuple[bool, bool]:
        async with await open_store(_store_url(home)) as store:
            p = PairingStore(store=store)
            return await p.is_approved("telegram", "99"), await p.is_approved("telegram", "98")

    assert asyncio.run(allowed()) == (True, False)


def test_geode_main_turns_config_errors_into_exit_2(home: Path) -> None:
    import subprocess

    env = {"GEODE_HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path.cwd())}
    done = subprocess.run([sys.executable, "-m", "geode", "pairing", "approve", "ZZZZ"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "no pairing code 'ZZZZ'" in done.stderr and "Traceback" not in done.stderr


def test_bindings_add_knows_the_channel_only_send_file_tool(cli: CliRunner, home: Path) -> None:
    """send_file exists only in channel sessions (the layer adds it), yet a binding names it
    in tools / approve like any other tool."""
    for flag, channel in (("--tool", "-100901"), ("--approve", "-100902")):
        added = cli.invoke(app, ["bindings", "add", "telegram", channel, flag, "send_file"])
        assert added.exit_code == 0, added.output
    listed = json.loads(cli.invoke(app, ["bindings", "list", "--json"]).output)
    assert sorted((b["tools"] or []) + b["approve"] for b in listed) == [["send_file"]] * 2
