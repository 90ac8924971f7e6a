"""A channel binding's ``approve`` list (DAEMON): those tools are offered, never preapproved,
and every call asks the session's approver (check 6); without an approver, or with a "no",
nothing runs. run_bash reaches a channel only this way."""

from __future__ import annotations

import pytest
from exec_helpers import HarnessFactory, ScriptedApprover

from geode.errors import ConfigError
from geode.policy import session_scope
from geode.settings import BindingSettings


def test_scope_offers_approve_tools_without_preapproving_them() -> None:
    scope = session_scope("DAEMON", channel_tools=["read_file"],
                          channel_approve=["write_file", "run_bash"])
    assert scope.permits("run_bash") and scope.permits("write_file")
    assert scope.needs_approval == {"write_file", "run_bash"}
    assert "run_bash" not in scope.preapproved and "write_file" not in scope.preapproved
    # the floor still holds for what approve does not name
    assert not scope.permits("delegate_task") and not scope.permits("computer")
    # default tool set (no `tools`): run_bash still only through approve
    default = session_scope("DAEMON", channel_approve=["run_bash"])
    assert default.permits("run_bash") and default.needs_approval == {"run_bash"}
    assert not session_scope("DAEMON").permits("run_bash")


def test_scope_refuses_approve_outside_daemon_and_computer_needs_its_switch() -> None:
    # (run_bash in `tools` is a config error of the binding; the scope's floor denies it too)
    assert not session_scope("DAEMON", channel_tools=["run_bash"]).permits("run_bash")
    with pytest.raises(ConfigError, match="approve"):
        session_scope("HEADLESS", channel_approve=["write_file"])
    # computer needs the switch even when listed in approve
    assert not session_scope("DAEMON", channel_approve=["computer"]).permits("computer")
    on = session_scope("DAEMON", channel_approve=["computer"], computer_use=True)
    assert on.permits("computer") and "computer" not in on.preapproved


@pytest.mark.parametrize("answer", ["allow", "always"])
async def test_an_approved_call_runs_and_every_call_asks_again(
    harness: HarnessFactory, answer: str
) -> None:
    approver = ScriptedApprover(answer)
    h = harness(mode="DAEMON", approver=approver, channel_tools=["read_file"],
                channel_approve=["write_file", "run_bash"])
    assert not (await h.run_one("write_file")).is_error
    assert not (await h.run_one("write_file")).is_error  # "always" is not remembered here
    assert not (await h.run_one("run_bash")).is_error
    assert [r.tool for r in approver.requests] == ["write_file", "write_file", "run_bash"]
    assert all(not r.always_allowed for r in approver.requests)
    assert h.rec.names() == ["write_file", "write_file", "run_bash"]
    assert not (await h.run_one("read_file")).is_error  # `tools` runs unasked
    assert len(approver.requests) == 3


async def test_a_denied_call_has_no_effect(harness: HarnessFactory) -> None:
    approver = ScriptedApprover("deny")
    h = harness(mode="DAEMON", approver=approver, channel_approve=["run_bash"])
    res = await h.run_one("run_bash")
    assert res.is_error and res.text_content.startswith("denied by approval: ")
    assert h.rec.calls == [] and h.receipts.records == {}
    assert h.denied_kinds() == [("run_bash", "approval")]


async def test_without_an_approver_every_approve_call_is_denied(harness: HarnessFactory) -> None:
    h = harness(mode="DAEMON", channel_approve=["write_file", "read_file"])
    for tool in ("write_file", "read_file"):  # a read-only tool listed in approve asks too
        res = await h.run_one(tool)
        assert res.is_error and "no approver is connected" in res.text_content
    assert h.rec.calls == []
    # a write tool in neither list is still the plain DAEMON policy denial
    res = await h.run_one("web_fetch")
    assert res.is_error and res.text_content.startswith("denied by policy: ")


def test_binding_keys_are_validated() -> None:
    b = BindingSettings.model_validate({
        "platform": "telegram", "channel": -100, "approve": ["write_file", "run_bash"],
        "approvers": [42, "U1"], "approval_timeout_s": 60,
    })
    assert (b.approvers, b.approval_timeout_s) == (["42", "U1"], 60)
    assert BindingSettings(platform="slack", channel="C1").approval_timeout_s == 300
    for bad, why in [
        ({"tools": ["run_bash"]}, "run_bash cannot be in a binding's `tools`"),
        ({"tools": ["write_file"], "approve": ["write_file"]}, "in both"),
        ({"approve": ["delegate_task"]}, "delegate_task"),
        ({"approve": ["computer"]}, "computer_use = true"),
        ({"approval_timeout_s": 0}, "approval_timeout_s"),
        ({"approve_computer_actions": ["click", "drag"]}, "unknown drag"),
    ]:
        with pytest.raises(ValueError, match=why):
            BindingSettings.model_validate({"platform": "telegram", "channel": "1", **bad})


async def test_a_named_answer_tells_the_model_who_decided(harness: HarnessFactory) -> None:
    from geode.executor import ApprovalAnswer

    class Named:
        def __init__(self, answer: ApprovalAnswer) -> None:
            self.answer = answer

        async def __call__(self, request: object) -> ApprovalAnswer:
            return self.answer

    no = harness(mode="DAEMON", approver=Named(ApprovalAnswer(
        answer="deny", note="denied by ann (42)", by="ann (42)")), channel_approve=["run_bash"])
    res = await no.run_one("run_bash")
    assert res.text_content.startswith("denied by approval: denied by ann (42); 'run_bash' did")
    assert no.rec.calls == []
    yes = harness(mode="DAEMON", approver=Named(ApprovalAnswer(
        answer="allow", note="approved by bob (43)", by="bob (43)")), channel_approve=["run_bash"])
    assert not (await yes.run_one("run_bash")).is_error
    assert yes.rec.names() == ["run_bash"]


def test_describe_call_shows_diffs_commands_and_mcp_arguments(tmp_path) -> None:
    from geode.executor.summary import describe_call

    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    edit = describe_call("edit_file", {"path": "a.txt", "old_string": "two",
                                       "new_string": "2"}, tmp_path)
    assert "--- a/a.txt" in edit and "-two" in edit and "+2" in edit and " one" in edit
    write = describe_call("write_file", {"path": "a.txt", "content": "one\n"}, tmp_path)
    assert write.startswith("write_file a.txt (replaces it)") and "-three" in write
    outside = describe_call("write_file", {"path": "../x", "content": "y"}, tmp_path)
    assert "(new file)" in outside  # nothing outside the workspace is read for a diff
    bash = describe_call("run_bash", {"command": "make test"}, tmp_path)
    assert "run_bash in the sandbox" in bash and "make test" in bash and "cwd ." in bash
    mcp = describe_call("docs__publish", {"page": "home"}, None)
    assert mcp.startswith("MCP server docs, tool publish") and '"page": "home"' in mcp
    long = describe_call("write_file", {"path": "b.txt", "content": "x\n" * 5000}, tmp_path)
    assert "more chars)" in long and len(long) < 3000


def test_computer_in_approve_asks_only_for_the_actions_named_risky() -> None:
    from geode.executor._policy import check_policy
    from geode.executor.decisions import Allow, Ask
    from geode.tools.builtin import computer

    risky = {"computer": frozenset({"click", "type", "key"})}
    scope = session_scope("DAEMON", channel_approve=["computer"], computer_use=True,
                          approve_actions=risky)
    for action in ("click", "type", "key"):
        assert isinstance(check_policy(computer, scope=scope, args={"action": action}), Ask)
    for action in ("screenshot", "mouse_move", "scroll"):
        assert isinstance(check_policy(computer, scope=scope, args={"action": action}), Allow)
    # without the list every call of a tool in approve asks
    every = session_scope("DAEMON", channel_approve=["computer"], computer_use=True)
    assert isinstance(check_policy(computer, scope=every, args={"action": "screenshot"}), Ask)
    # the binding's default: click, type and key
    b = BindingSettings(platform="telegram", channel="1", computer_use=True,
                        approve=["computer"])
    assert b.approve_computer_actions == ["click", "type", "key"]


def test_describe_call_says_the_computer_action_in_words() -> None:
    from geode.executor.summary import describe_call

    assert describe_call("computer", {"action": "click", "x": 10, "y": 20}, None) == \
        "computer: left-click at (10, 20)"
    assert describe_call("computer", {"action": "type", "text": "héllo"}, None) == \
        'computer: type "héllo"'
    assert describe_call("computer", {"action": "key", "keys": "ctrl+l Return"}, None) == \
        "computer: press the keys ctrl+l Return"
