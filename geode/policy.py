"""Session modes and the tool scope each one starts from, as data.

A *mode* decides who can be asked (a human at a terminal, or nobody), the time budget, and
which tools a session may never run. :func:`session_scope` turns a mode plus the operator's
inputs (a channel binding's allow-list, the computer-use switch, ``--allow-tool`` /
``--deny-tool``) into the immutable :class:`SessionScope` the registry projects tool plans
from and the executor checks every call against.

Rules worth stating once:

- Unattended modes (DAEMON, HEADLESS, SCHEDULER) never ask: a call that needs approval is
  denied unless the operator named the tool explicitly (the binding's ``tools`` list,
  ``--allow-tool``, or the computer-use switch) — those names are *preapproved*.
- The DAEMON computer-use switch enables ``computer`` only when it is literally ``True``;
  the string ``"true"``, ``1`` or any other truthy value leaves it off, so a config typo or a
  loosely-typed source can never hand a chat channel the mouse and keyboard.
- ``--allow-tool`` is a CLI flag: it applies to REPL, IPC and HEADLESS sessions only. DAEMON
  and SCHEDULER sessions are configured by the operator (bindings, schedules), never by the
  flags of whoever started ``geode serve``; passing allow-tools for them is a ConfigError.
- The mode's deny list is a floor in DAEMON: a binding's allow-list cannot lift it (only the
  computer-use switch can, for ``computer``). A binding's ``approve`` list lifts it for
  ``run_bash`` only: such a tool is offered, never preapproved, and each call waits for one
  of the binding's approvers (the executor's approval check).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from geode.errors import ConfigError

__all__ = [
    "MODE_POLICIES",
    "UNATTENDED_DENIED_TOOLS",
    "Mode",
    "ModePolicy",
    "SessionScope",
    "session_scope",
]

Mode = Literal["REPL", "IPC", "DAEMON", "HEADLESS", "SCHEDULER"]
_MODES: tuple[str, ...] = get_args(Mode)

#: tools an unattended session may not run by default: arbitrary shell, sub-agents that
#: inherit nothing of the boundary's context, and control of the desktop.
UNATTENDED_DENIED_TOOLS: frozenset[str] = frozenset({"run_bash", "delegate_task", "computer"})

#: modes whose ``--allow-tool`` comes from the person who started the run
_CLI_ALLOW_MODES: frozenset[str] = frozenset({"REPL", "IPC", "HEADLESS"})


@dataclass(frozen=True)
class ModePolicy:
    """What a mode decides on its own, before any operator input."""

    mode: Mode
    asks_human: bool
    time_budget_s: float | None
    denied_tools: frozenset[str]


MODE_POLICIES: dict[Mode, ModePolicy] = {
    "REPL": ModePolicy("REPL", True, None, frozenset()),
    "IPC": ModePolicy("IPC", True, None, frozenset()),
    "DAEMON": ModePolicy("DAEMON", False, 120.0, UNATTENDED_DENIED_TOOLS),
    "HEADLESS": ModePolicy("HEADLESS", False, None, UNATTENDED_DENIED_TOOLS),
    "SCHEDULER": ModePolicy("SCHEDULER", False, 300.0, UNATTENDED_DENIED_TOOLS),
}


@dataclass(frozen=True)
class SessionScope:
    """The tools one session may see and run, fixed when the session is built.

    ``allow_list`` None means "every tool not denied". ``preapproved`` names tools the
    operator allowed explicitly; they run without an approval request (sensitive
    personal-data tools excepted, see the executor's policy check).
    """

    mode: Mode
    denied_tools: frozenset[str]
    allow_list: frozenset[str] | None
    asks_human: bool
    computer_use: bool
    preapproved: frozenset[str] = frozenset()
    #: tools that run only after a named approver says yes for each call (a channel
    #: binding's ``approve``), even in a mode that otherwise asks nobody
    needs_approval: frozenset[str] = frozenset()
    #: for a tool in ``needs_approval``: the values of its ``action`` argument that ask
    #: (``"ARG=VALUE"``: that value of argument ARG, e.g. ``memory``'s ``scope=channel``);
    #: its other calls run without asking (absent: every call asks)
    approve_actions: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def asks_for(self, name: str, args: Mapping[str, Any]) -> bool:
        """Whether this call of ``name`` waits for a channel's approver."""
        if name not in self.needs_approval:
            return False
        actions = self.approve_actions.get(name)
        if actions is None:
            return True
        for value in actions:
            arg, sep, wanted = value.partition("=")
            if (str(args.get(arg)) == wanted) if sep else (str(args.get("action")) == value):
                return True
        return False

    def permits(self, name: str) -> bool:
        """Whether ``name`` is inside this scope (not denied, and allow-listed if one is set)."""
        if name in self.denied_tools:
            return False
        return self.allow_list is None or name in self.allow_list

    def refusal(self, name: str) -> str | None:
        """Why ``name`` is outside this scope, or None if it is inside."""
        if name in self.denied_tools:
            return f"'{name}' is not available in {self.mode} sessions"
        if self.allow_list is not None and name not in self.allow_list:
            return f"'{name}' is not in this channel's tool allow-list"
        return None


def session_scope(
    mode: Mode,
    *,
    channel_tools: Sequence[str] | None = None,
    channel_approve: Sequence[str] = (),
    computer_use: object = False,
    approve_actions: Mapping[str, frozenset[str]] | None = None,
    allow_tools: Sequence[str] = (),
    deny_tools: Sequence[str] = (),
) -> SessionScope:
    """Build the scope of one session.

    Args:
        mode: the session mode.
        channel_tools: a binding's runtime allow-list; None keeps the mode's default set.
        channel_approve: a binding's ``approve`` list (DAEMON only): offered, each call
            asks an approver; lifts the deny floor for ``run_bash`` (``computer`` still
            needs the switch).
        computer_use: the operator's DAEMON switch; only the literal ``True`` enables it.
        allow_tools: ``--allow-tool`` names (REPL, IPC, HEADLESS only): each is removed from
            the mode's deny list and preapproved.
        deny_tools: ``--deny-tool`` names, added to the deny list in every mode.

    Raises:
        ConfigError: unknown mode, or allow-tools given for DAEMON / SCHEDULER.
    """
    if mode not in _MODES:
        raise ConfigError(f"Unknown session mode {mode!r}; expected one of {', '.join(_MODES)}.")
    policy = MODE_POLICIES[mode]
    allowed = frozenset(allow_tools)
    if allowed and mode not in _CLI_ALLOW_MODES:
        raise ConfigError(
            f"--allow-tool cannot widen a {mode} session ({', '.join(sorted(allowed))}). "
            "Channel sessions take their tools from the binding's `tools` list in config.toml."
        )
    # `is True`, not truthiness: the switch must be the boolean the operator wrote.
    computer_on = mode == "DAEMON" and computer_use is True

    approve = frozenset(channel_approve)
    if approve and mode != "DAEMON":
        raise ConfigError(f"an `approve` list is a channel binding's; not for {mode} sessions")
    denied = policy.denied_tools - allowed
    if computer_on:
        denied -= {"computer"}
    denied -= approve & {"run_bash"}
    denied |= frozenset(deny_tools)

    allow_list = None if channel_tools is None else frozenset(channel_tools)
    if allow_list:  # a result too long to pass whole is paged in with it, wherever tools run
        allow_list |= {"read_result"}
    preapproved = allowed | (allow_list or frozenset())
    if allow_list is not None:
        allow_list |= approve
    if computer_on:
        preapproved |= {"computer"}
        if allow_list is not None:
            # The operator turned the switch on for this channel: that is the explicit grant.
            allow_list |= {"computer"}
    return SessionScope(
        mode=mode,
        denied_tools=denied,
        allow_list=allow_list,
        asks_human=policy.asks_human,
        computer_use=computer_on,
        preapproved=preapproved - denied - approve,
        needs_approval=approve - denied,
        approve_actions={k: frozenset(v) for k, v in (approve_actions or {}).items()
                         if k in approve - denied},
    )
