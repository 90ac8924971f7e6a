"""The deny matrix: tool x mode x computer-use switch, through the real executor."""

from __future__ import annotations

import pytest
from exec_helpers import SAMPLE_ARGS, HarnessFactory, ScriptedApprover

TOOLS = ["read_file", "write_file", "web_fetch", "run_bash", "computer", "delegate_task"]
SAFETY = {
    "read_file": "read_only", "write_file": "write", "web_fetch": "external",
    "run_bash": "dangerous", "computer": "dangerous", "delegate_task": "dangerous",
}
# (label, mode, approver answer or None)
MODES = [
    ("REPL-allow", "REPL", "allow"),
    ("REPL-deny", "REPL", "deny"),
    ("IPC", "IPC", "allow"),
    ("DAEMON", "DAEMON", None),
    ("HEADLESS", "HEADLESS", None),
    ("SCHEDULER", "SCHEDULER", None),
]
SWITCHES = [True, "true", 1, False]


def expected(tool: str, mode: str, answer: str | None, switch: object) -> str:
    """'ran' or the name of the check that must deny."""
    if SAFETY[tool] == "read_only":
        return "ran"
    if mode in ("REPL", "IPC"):
        return "ran" if answer == "allow" else "approval"
    if tool == "computer" and mode == "DAEMON" and switch is True:
        return "ran"  # the operator's literal-True switch is the explicit grant
    if tool in ("run_bash", "delegate_task", "computer"):
        return "scope"
    return "policy"  # write / external need approval; nobody to ask


@pytest.mark.parametrize("switch", SWITCHES, ids=repr)
@pytest.mark.parametrize(("label", "mode", "answer"), MODES, ids=[m[0] for m in MODES])
@pytest.mark.parametrize("tool", TOOLS)
async def test_deny_matrix(
    harness: HarnessFactory, tool: str, label: str, mode: str, answer: str | None,
    switch: object,
) -> None:
    approver = ScriptedApprover(answer) if answer is not None else None
    h = harness(mode, approver=approver, computer_use=switch)
    res = await h.run_one(tool)
    want = expected(tool, mode, answer, switch)
    if want == "ran":
        assert not res.is_error, res.text_content
        assert h.rec.calls == [(tool, SAMPLE_ARGS[tool])]
        receipt = h.receipts.records.get(res.tool_use_id)
        if SAFETY[tool] == "read_only":
            assert receipt is None
        else:
            assert receipt is not None and receipt.status == "done"
        assert h.timeline.kinds() == ["tool.proposed", "tool.started", "tool.finished"]
    else:
        assert res.is_error
        assert res.text_content.startswith(f"denied by {want}: "), res.text_content
        assert h.rec.calls == []
        assert h.receipts.records == {}
        assert h.denied_kinds() == [(tool, want)]
        assert "tool.started" not in h.timeline.kinds()
    if approver is not None:
        # read_only tools never ask; everything else asked exactly once in attended modes
        assert len(approver.requests) == (0 if SAFETY[tool] == "read_only" else 1)


async def test_unattended_denial_explains_and_discourages_retry(harness: HarnessFactory) -> None:
    h = harness("DAEMON")
    res = await h.run_one("write_file")
    assert "nobody to ask" in res.text_content
    assert "binding's `tools`" in res.text_content
    assert "Do not retry" in res.text_content


async def test_binding_allow_list_preapproves_in_daemon(harness: HarnessFactory) -> None:
    h = harness("DAEMON", channel_tools=["read_file", "write_file"])
    ok = await h.run_one("write_file")
    not_listed = await h.run_one("web_fetch")
    assert not ok.is_error
    assert not_listed.text_content.startswith("denied by scope: ")
    assert "allow-list" in not_listed.text_content
    assert h.rec.names() == ["write_file"]


async def test_binding_allow_list_cannot_lift_daemon_deny(harness: HarnessFactory) -> None:
    h = harness("DAEMON", channel_tools=["run_bash"])
    res = await h.run_one("run_bash")
    assert res.text_content.startswith("denied by scope: ")
    assert h.rec.calls == []


async def test_allow_tool_lifts_headless_deny_and_preapproves(harness: HarnessFactory) -> None:
    h = harness("HEADLESS", allow_tools=["run_bash", "write_file"])
    bash = await h.run_one("run_bash")
    write = await h.run_one("write_file")
    assert not bash.is_error and not write.is_error
    assert h.rec.names() == ["run_bash", "write_file"]


async def test_deny_tool_applies_even_in_repl(harness: HarnessFactory) -> None:
    approver = ScriptedApprover("allow")
    h = harness("REPL", approver=approver, deny_tools=["read_file"])
    res = await h.run_one("read_file")
    assert res.text_content.startswith("denied by scope: ")
    assert h.rec.calls == [] and approver.requests == []


async def test_repl_allow_tool_skips_the_prompt(harness: HarnessFactory) -> None:
    approver = ScriptedApprover("deny")
    h = harness("REPL", approver=approver, allow_tools=["write_file"])
    res = await h.run_one("write_file")
    assert not res.is_error
    assert approver.requests == []


async def test_repl_without_an_approver_denies(harness: HarnessFactory) -> None:
    h = harness("REPL", approver=None)
    res = await h.run_one("write_file")
    assert res.text_content.startswith("denied by approval: ")
    assert "no approver" in res.text_content
    assert h.rec.calls == []
