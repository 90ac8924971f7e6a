"""Check 3 — policy: does this safety level need a human, and is there one to ask?

- read_only tools run without approval in every mode.
- write / external / dangerous tools need approval, unless the operator preapproved the
  tool (binding allow-list, ``--allow-tool``, the DAEMON computer-use switch).
- sensitive personal-data tools need approval on every call; preapproval does not apply.
- Unattended modes have nobody to ask: needing approval there is a denial.
- A tool in the scope's ``needs_approval`` (a channel binding's ``approve``) asks on every
  call, whatever its safety level, even in DAEMON mode: the channel's approvers decide.
  Where the scope names the ``action`` values that ask (``computer``'s click / type / key),
  its other actions run unasked: the operator's computer-use switch allowed the tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from geode.executor.decisions import Allow, Ask, Deny, Verdict
from geode.policy import SessionScope
from geode.tools.base import ToolDef

__all__ = ["check_policy"]

_HINTS = {
    "DAEMON": "an operator can allow it for this channel with the binding's `tools` list",
    "HEADLESS": "the run can allow it with --allow-tool {name}",
    "SCHEDULER": "the task's tools are fixed by the operator",
}


def check_policy(
    tool: ToolDef, *, scope: SessionScope, args: Mapping[str, Any] | None = None
) -> Verdict:
    if tool.name in scope.needs_approval:
        if scope.asks_for(tool.name, args or {}):
            return Ask(f"'{tool.name}' runs in this channel only after an approver says yes")
        return Allow()
    sensitive = tool.personal_data == "sensitive"
    if not sensitive and (tool.safety == "read_only" or tool.name in scope.preapproved):
        return Allow()
    what = "sensitive personal-data" if sensitive else tool.safety
    if scope.asks_human:
        return Ask(f"'{tool.name}' is a {what} tool")
    hint = _HINTS.get(scope.mode, "").format(name=tool.name)
    return Deny(
        "policy",
        f"'{tool.name}' is a {what} tool and needs approval, but a {scope.mode} session has "
        f"nobody to ask ({hint}). Do not retry this call.",
    )
