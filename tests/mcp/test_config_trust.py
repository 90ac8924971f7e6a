"""Config shapes, tool classification, and project trust (untrusted entries never spawn)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mcp_types as mt
import pytest

from geode.errors import ConfigError
from geode.mcp import MCPServerManager
from geode.mcp.config import (
    ServerConfig,
    ServerPolicy,
    ToolPolicy,
    expand_vars,
    load_config_file,
    parse_servers,
)
from geode.mcp.tools import classify, model_tool_name
from geode.mcp.trust import (
    is_trusted,
    trust_project,
    untrusted_project_servers,
)
from geode.settings import load_settings
from tests.mcp.conftest import ECHO_SERVER

# -- config shapes -----------------------------------------------------------------------


def test_json_shape_stdio_and_http(tmp_path: Path) -> None:
    f = tmp_path / "mcp.json"
    f.write_text(json.dumps({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "srv"], "env": {"TOKEN": "${GH}"}},
        "remote": {"type": "http", "url": "http://127.0.0.1:9/mcp",
                   "headers": {"Authorization": "Bearer ${KEY}"}},
        "off": {"command": "x", "disabled": True},
    }}))
    servers = {s.name: s for s in load_config_file(f)}
    assert set(servers) == {"files", "remote"}
    assert servers["files"].transport == "stdio"
    assert servers["files"].args == ("-y", "srv")
    assert servers["files"].env == {"TOKEN": "${GH}"}  # expanded at start, not at parse
    assert servers["remote"].transport == "http"
    assert servers["remote"].headers == {"Authorization": "Bearer ${KEY}"}
    assert servers["files"].policy is None


def test_toml_shape_with_policy() -> None:
    section = {"servers": {"gh": {
        "command": "gh-mcp",
        "policy": {"safety": "write", "resource_keys": ["host:api.github.com"],
                   "tools": {"get_issue": {"safety": "read_only"},
                             "create_issue": {"safety": "external", "idempotent": False,
                                              "resource_keys": ["repo:{repo}"]}}},
    }}}
    (gh,) = parse_servers(section, origin="config.toml")
    assert gh.policy is not None
    assert gh.policy.safety == "write"
    assert gh.policy.tools["get_issue"].safety == "read_only"


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"mcpServers": {"a": {"args": []}}}, "exactly one of `command`"),
        ({"mcpServers": {"a": {"command": "x", "url": "http://h"}}}, "exactly one of"),
        ({"mcpServers": {"a__b": {"command": "x"}}}, "SERVER__TOOL"),
        ({"mcpServers": {"a": {"command": "x", "policy": {"safety": "harmless"}}}}, "'a'"),
        ({"mcpServers": {"a": {"command": "x", "policy": {"tools": {"t": {"safty": "x"}}}}}},
         "safty"),
        ({"mcpServers": {"a": {"type": "sse", "url": "http://h/sse"}}}, "SSE"),
    ],
)
def test_bad_entries_name_the_server(data: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_servers(data, origin="f.json")
    assert fragment in str(err.value)
    assert "f.json" in str(err.value)


def test_bad_json_file_is_a_config_error(tmp_path: Path) -> None:
    f = tmp_path / "x.json"
    f.write_text("{nope")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config_file(f)
    f.write_text("{}")
    with pytest.raises(ConfigError, match="no servers"):
        load_config_file(f)


def test_expand_vars() -> None:
    env = {"A": "1"}
    assert expand_vars("x-${A}-${B:-dflt}", env.get) == "x-1-dflt"
    with pytest.raises(LookupError):
        expand_vars("${MISSING}", env.get)


# -- classification ----------------------------------------------------------------------


def _tool(name: str, **ann: bool) -> mt.Tool:
    return mt.Tool(name=name, input_schema={"type": "object"},
                   annotations=mt.ToolAnnotations(**ann) if ann else None)


def _server(policy: ServerPolicy | None) -> ServerConfig:
    return ServerConfig(name="s", origin="t", command="x", policy=policy)


def test_without_policy_annotations_are_not_believed() -> None:
    c = classify(_tool("read", read_only_hint=True), _server(None))
    assert (c.safety, c.idempotent) == ("external", False)


def test_with_policy_annotations_and_overrides() -> None:
    policy = ServerPolicy(
        safety="write", resource_keys=("host:x",),
        tools={"danger": ToolPolicy(safety="dangerous"),
               "ro_claim": ToolPolicy(safety="write"),
               "keyed": ToolPolicy(resource_keys=("file:{path}",), deadline_s=5)},
    )
    srv = _server(policy)
    ro = classify(_tool("read", read_only_hint=True), srv)
    assert (ro.safety, ro.idempotent) == ("read_only", True)
    idem = classify(_tool("put", idempotent_hint=True), srv)
    assert (idem.safety, idem.idempotent) == ("write", True)
    plain = classify(_tool("plain"), srv)
    assert (plain.safety, plain.idempotent, plain.resource_keys) == ("write", False, ("host:x",))
    assert classify(_tool("danger", read_only_hint=True), srv).safety == "dangerous"
    # the operator's level replaces the server's read-only claim and its implied idempotence
    overridden = classify(_tool("ro_claim", read_only_hint=True), srv)
    assert (overridden.safety, overridden.idempotent) == ("write", False)
    keyed = classify(_tool("keyed"), srv)
    assert keyed.resource_keys == ("file:{path}",) and keyed.deadline_s == 5
    untrusting = _server(ServerPolicy(safety="external", trust_annotations=False))
    assert classify(_tool("read", read_only_hint=True), untrusting).safety == "external"


def test_model_tool_names_are_provider_safe() -> None:
    assert model_tool_name("gh", "get_issue") == "gh__get_issue"
    assert model_tool_name("gh", "repo.read/x") == "gh__repo_read_x"
    long = model_tool_name("server", "t" * 100)
    assert len(long) == 64 and long.startswith("server__")
    assert long != model_tool_name("server", "t" * 99)


# -- trust -------------------------------------------------------------------------------


def _project(tmp_path: Path, marker: Path, *, extra_arg: str = "") -> Path:
    proj = tmp_path / "proj"
    (proj / ".geode").mkdir(parents=True, exist_ok=True)
    args = [str(ECHO_SERVER)] + ([extra_arg] if extra_arg else [])
    (proj / ".geode" / "config.toml").write_text(
        "[mcp.servers.local]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = {json.dumps(args)}\n"
        f"env = {{ ECHO_STARTS = {json.dumps(str(marker))} }}\n"
    )
    return proj


def test_trust_records_hash_and_change_needs_trust_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proj = _project(tmp_path, tmp_path / "m")
    assert untrusted_project_servers(proj, home) == ["local"]
    assert not is_trusted(proj, home)
    rec = trust_project(proj, home)
    assert rec.servers == ("local",)
    stored = json.loads((home / "trusted_projects.json").read_text())
    assert stored[str(proj.resolve())]["sha256"] == rec.sha256
    assert is_trusted(proj, home)
    assert untrusted_project_servers(proj, home) == []
    # a comment does not change the parsed section; an argument does
    cfg = proj / ".geode" / "config.toml"
    cfg.write_text("# reviewed\n" + cfg.read_text())
    assert is_trusted(proj, home)
    _project(tmp_path, tmp_path / "m", extra_arg="--evil")
    assert not is_trusted(proj, home)
    assert untrusted_project_servers(proj, home) == ["local"]


def test_trust_without_mcp_section_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / ".geode").mkdir()
    (tmp_path / ".geode" / "config.toml").write_text("[model]\ndefault = 'x'\n")
    with pytest.raises(ConfigError, match="no \\[mcp\\] section"):
        trust_project(tmp_path, tmp_path / "home")


async def test_untrusted_project_never_spawns_trusted_does(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    marker = tmp_path / "spawned.txt"
    proj = _project(tmp_path, marker)
    env = {"GEODE_HOME": str(home), "PATH": "/usr/bin:/bin"}

    settings, secrets = load_settings(cwd=proj, env=env)
    # the project's [mcp] never reaches settings.mcp; the manager reads it, gated by trust
    assert "local" not in settings.mcp.get("servers", {})
    manager = MCPServerManager.from_settings(settings, secrets, project_dir=proj)
    try:
        assert manager.servers == []
        assert manager.untrusted == ("local",)
        assert await manager.tools_for(None) == []
    finally:
        await manager.aclose()
    assert not marker.exists(), "an untrusted project's command was spawned"

    trust_project(proj, home)
    manager = MCPServerManager.from_settings(settings, secrets, project_dir=proj)
    try:
        names = [t.name for t in await manager.tools_for(None)]
    finally:
        await manager.aclose()
    assert "local__echo" in names
    assert marker.exists() and len(marker.read_text().split()) == 1

    # changed after trust: not started again
    marker.unlink()
    _project(tmp_path, marker, extra_arg="--mode=ok")
    settings, secrets = load_settings(cwd=proj, env=env)
    manager = MCPServerManager.from_settings(settings, secrets, project_dir=proj)
    try:
        assert await manager.tools_for(None) == []
        assert manager.untrusted == ("local",)
    finally:
        await manager.aclose()
    assert not marker.exists()


def test_project_policy_cannot_relabel_a_global_server(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[mcp.servers.gh]\ncommand = "gh-mcp"\n')
    proj = tmp_path / "proj"
    (proj / ".geode").mkdir(parents=True)
    (proj / ".geode" / "config.toml").write_text(
        '[mcp.servers.gh.policy]\nsafety = "read_only"\n'
    )
    settings, secrets = load_settings(cwd=proj, env={"GEODE_HOME": str(home)})
    manager = MCPServerManager.from_settings(settings, secrets, project_dir=proj)
    assert manager.configs["gh"].policy is None
    assert manager.configs["gh"].command == "gh-mcp"


def test_geode_trust_command(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from geode.cli import cmd_mcp  # noqa: F401 - registers the commands on the app
    from geode.cli.app import app

    home = tmp_path / "home"
    proj = _project(tmp_path, tmp_path / "m")
    res = CliRunner().invoke(app, ["trust", str(proj)], env={"GEODE_HOME": str(home)})
    assert res.exit_code == 0, res.output
    assert "local:" in res.output and str(ECHO_SERVER) in res.output  # shows what it trusts
    assert "trusted 1 MCP server(s)" in res.output
    assert is_trusted(proj, home)


def test_a_project_mcp_section_is_never_called_ignored(tmp_path: Path) -> None:
    """Issue #23 item 6: `geode trust` makes it run, so a warning that it is ignored (even
    before trust: `mcp list` / the manager say it waits for trust) misleads."""
    from structlog.testing import capture_logs

    home = tmp_path / "home"
    proj = _project(tmp_path, tmp_path / "m")
    trust_project(proj, home)
    with capture_logs() as logs:
        load_settings(cwd=proj, env={"GEODE_HOME": str(home)})
    assert [e for e in logs if "ignored" in str(e.get("event"))] == []


def test_geode_trust_of_a_missing_directory_says_so(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from geode.cli import cmd_mcp  # noqa: F401 - registers the commands on the app
    from geode.cli.app import app

    res = CliRunner().invoke(app, ["trust", str(tmp_path / "nope")],
                             env={"GEODE_HOME": str(tmp_path / "home")})
    assert isinstance(res.exception, ConfigError)  # main() turns it into exit 2
    assert "no such directory" in str(res.exception)
