"""Approval buttons on Slack: the Block Kit of a request, and a click (a ``block_actions``
interactive payload) as the ``/approve ID`` / ``/deny ID`` command of the user who clicked.

The request is a message whose blocks are its text (``section`` blocks, mrkdwn) and one
``actions`` block with two buttons, **Approve** (``geode_approve``, style primary) and
**Deny** (``geode_deny``, style danger), each carrying the request's short id as its value.
Slack delivers a click over Socket Mode (an ``interactive`` envelope) or as a signed
``payload=<json>`` form POST to the Request URL; either way bolt hands the parsed payload to
the connector, which records the event made here before acknowledging. The command's answer
goes to the clicker alone (``answer: private``: an ephemeral message, no thread notice); the
request message itself shows the outcome once it is edited.

A click's dedupe key is its ``trigger_id`` (one per interaction): a redelivered envelope or
retried POST is recorded once; a second click is a second command, which the store decides
once (the second is answered "already …"). Everything here is total over arbitrary JSON: a
payload that is not a click on one of our buttons gives ``None``.
"""

from __future__ import annotations

import re
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bots.events import InboundEvent
from bots.slack._convert import valid_ts

__all__ = [
    "APPROVE_ACTION",
    "DENY_ACTION",
    "BlockActions",
    "approval_blocks",
    "convert_action",
    "is_block_actions",
]

APPROVE_ACTION = "geode_approve"
DENY_ACTION = "geode_deny"
_VERBS = {APPROVE_ACTION: "approve", DENY_ACTION: "deny"}
#: the short ids of ``bots.store.approvals`` (and some room)
_SHORT_ID = re.compile(r"^[A-Z0-9]{4,16}$")
#: a section block's text may not exceed 3000 characters
_SECTION_LIMIT = 3000
_MAX_SECTIONS = 20


def _sections(text: str) -> list[str]:
    """``text`` in pieces of at most :data:`_SECTION_LIMIT`, cut at line ends where possible."""
    pieces: list[str] = []
    rest = text
    while rest and len(pieces) < _MAX_SECTIONS:
        if len(rest) <= _SECTION_LIMIT:
            pieces.append(rest)
            break
        cut = rest.rfind("\n", 0, _SECTION_LIMIT)
        if cut <= 0:
            cut = _SECTION_LIMIT
        pieces.append(rest[:cut])
        rest = rest[cut:].lstrip("\n")
    return pieces or [" "]


def approval_blocks(text: str, short_id: str) -> list[dict[str, Any]]:
    """The blocks of an approval request: its text, then Approve / Deny."""
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": piece}}
        for piece in _sections(text)
    ]
    blocks.append({
        "type": "actions",
        "block_id": f"geode_approval:{short_id}",
        "elements": [
            {"type": "button", "action_id": APPROVE_ACTION, "style": "primary",
             "text": {"type": "plain_text", "text": "Approve"}, "value": short_id},
            {"type": "button", "action_id": DENY_ACTION, "style": "danger",
             "text": {"type": "plain_text", "text": "Deny"}, "value": short_id},
        ],
    })
    return blocks


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _User(_Model):
    id: str = Field(min_length=1, max_length=100)
    name: str = Field(default="", max_length=200)
    username: str = Field(default="", max_length=200)


class _Team(_Model):
    id: str = Field(default="", max_length=100)


class _Channel(_Model):
    id: str = Field(min_length=1, max_length=100)


class _Container(_Model):
    type: str = ""
    channel_id: str = Field(default="", max_length=100)
    message_ts: str = Field(default="", max_length=40)
    thread_ts: str = Field(default="", max_length=40)


class _Message(_Model):
    ts: str = Field(default="", max_length=40)
    thread_ts: str = Field(default="", max_length=40)


class _Action(_Model):
    type: str = ""
    action_id: str = Field(default="", max_length=255)
    value: str = Field(default="", max_length=2000)
    action_ts: str = Field(default="", max_length=40)


class BlockActions(_Model):
    """The parts of a ``block_actions`` payload a click needs (the rest is ignored)."""

    type: str
    user: _User
    team: _Team | None = None
    channel: _Channel | None = None
    container: _Container = _Container()
    message: _Message | None = None
    trigger_id: str = Field(default="", max_length=200)
    actions: list[_Action] = Field(default_factory=list, max_length=25)


def is_block_actions(body: Any) -> bool:
    """Whether an interactive payload is a ``block_actions`` one (ours or not)."""
    return isinstance(body, dict) and body.get("type") == "block_actions"


def convert_action(body: Any, *, team: str) -> InboundEvent | None:
    """A click on an approval button, as ``/approve ID`` / ``/deny ID`` from the clicker in
    the request message's thread; None for anything else (other actions, malformed)."""
    if not is_block_actions(body):
        return None
    try:
        p = BlockActions.model_validate(body)
    except ValidationError:
        return None
    action = next((a for a in p.actions if a.type == "button" and a.action_id in _VERBS), None)
    if action is None or _SHORT_ID.match(action.value) is None:
        return None
    channel = p.container.channel_id or (p.channel.id if p.channel else "")
    msg_ts = p.container.message_ts or (p.message.ts if p.message else "")
    if not channel or not valid_ts(msg_ts):
        return None
    if p.team is not None and p.team.id and team and p.team.id != team:
        return None  # another workspace's click: not this connector's
    thread = p.container.thread_ts or (p.message.thread_ts if p.message else "")
    root = thread if valid_ts(thread) else msg_ts
    click = p.trigger_id or f"{p.user.id}:{action.action_ts or msg_ts}"
    date = int(float(action.action_ts)) if valid_ts(action.action_ts) else int(time.time())
    return InboundEvent(
        platform="slack", workspace=team, channel=channel, thread_root=root,
        message_id=f"act:{click}"[:100], sender=p.user.id,
        dedupe_key=f"slack:{team}:act:{click}"[:250],
        text=f"/{_VERBS[action.action_id]} {action.value}",
        sender_name=p.user.name or p.user.username, mentions_bot=True, reply_to=msg_ts,
        reply_to_bot=True, is_dm=channel.startswith("D"), date=date,
        extra={"action": "button", "answer": "private", "action_user": p.user.id},
    )
