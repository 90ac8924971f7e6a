"""Mode policies, session scopes, and the registry's per-session projection."""

from __future__ import annotations

import pytest
from exec_helpers import Recorder, standard_tools

from geode.errors import ConfigError
from geode.policy import MODE_POLICIES, UNATTENDED_DENIED_TOOLS, session_scope
from geode.tools.registry import DuplicateToolError, ToolRegistry


def test_mode_policies_are_data() -> None:
    table = {m: (p.asks_human, p.time_budget_s, p.denied_tools) for m, p in MODE_POLICIES.items()}
    assert table == {
        "REPL": (True, None, frozenset()),
        "IPC": (True, None, frozenset()),
        "DAEMON": (False, 120.0, UNATTENDED_DENIED_TOOLS),
        "HEADLESS": (False, None, UNATTENDED_DENIED_TOOLS),
        "SCHEDULER": (False, 300.0, UNATTENDED_DENIED_TOOLS),
    }
    assert frozenset({"run_bash", "delegate_task", "computer"}) == UNATTENDED_DENIED_TOOLS


@pytest.mark.parametrize(("switch", "enabled"), [
    (True, True), ("true", False), ("True", False), (1, False), (1.0, False), ([True], False),
    (False, False), (None, False),
])
def test_computer_switch_only_literal_true(switch: object, enabled: bool) -> None:
    scope = session_scope("DAEMON", computer_use=switch)
    assert scope.computer_use is enabled
    assert scope.permits("computer") is enabled
    assert ("computer" in scope.preapproved) is enabled


@pytest.mark.parametrize("mode", ["REPL", "IPC", "HEADLESS", "SCHEDULER"])
def test_computer_switch_is_daemon_only(mode: str) -> None:
    scope = session_scope(mode, computer_use=True)  # type: ignore[arg-type]
    assert scope.computer_use is False
    assert "computer" not in scope.preapproved


def test_computer_switch_joins_the_channel_allow_list() -> None:
    scope = session_scope("DAEMON", channel_tools=["read_file"], computer_use=True)
    assert scope.permits("computer") and scope.permits("read_file")
    assert not scope.permits("write_file")


@pytest.mark.parametrize("mode", ["DAEMON", "SCHEDULER"])
def test_allow_tool_is_refused_for_operator_configured_modes(mode: str) -> None:
    with pytest.raises(ConfigError, match="cannot widen"):
        session_scope(mode, allow_tools=["run_bash"])  # type: ignore[arg-type]


def test_allow_and_deny_tool() -> None:
    scope = session_scope("HEADLESS", allow_tools=["run_bash"], deny_tools=["web_fetch"])
    assert scope.permits("run_bash") and "run_bash" in scope.preapproved
    assert not scope.permits("web_fetch")
    assert not scope.permits("delegate_task")
    # deny wins over allow for the same name
    both = session_scope("REPL", allow_tools=["x"], deny_tools=["x"])
    assert not both.permits("x") and "x" not in both.preapproved


def test_unknown_mode_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Unknown session mode"):
        session_scope("ROOT")  # type: ignore[arg-type]


def test_registry_rejects_duplicates() -> None:
    rec = Recorder()
    reg = ToolRegistry(standard_tools(rec))
    with pytest.raises(DuplicateToolError, match="read_file"):
        reg.register(standard_tools(rec)[0])


def test_projection_hides_what_the_scope_denies() -> None:
    reg = ToolRegistry(standard_tools(Recorder()))
    assert reg.project(session_scope("REPL")).names() == sorted(reg.names())
    daemon = reg.project(session_scope("DAEMON"), generation=3)
    assert daemon.names() == ["read_file", "web_fetch", "write_file"]
    assert daemon.generation == 3
    bound = reg.project(session_scope("DAEMON", channel_tools=["read_file", "run_bash"]))
    assert bound.names() == ["read_file"]
    spec_names = [s.name for s in bound.specs()]
    assert spec_names == ["read_file"]  # the model is never shown a denied tool
