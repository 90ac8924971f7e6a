"""The Slack connector (slack-bolt / slack_sdk): Socket Mode, or HTTP Events API with
signature verification; mrkdwn rendering; ``/geode`` slash command.

Its names are imported when first used (:mod:`bots.slack.options`, the platform's spec,
imports no SDK: the harness reads it in every process).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bots.slack._mrkdwn import SLACK_LIMIT, chunk_mrkdwn, markdown_to_mrkdwn, render_progress
    from bots.slack.connector import SLACK_HELP, SlackConnector, SlackOptions

__all__ = [
    "SLACK_HELP",
    "SLACK_LIMIT",
    "SlackConnector",
    "SlackOptions",
    "chunk_mrkdwn",
    "markdown_to_mrkdwn",
    "render_progress",
]

_LAZY = {"SLACK_LIMIT": "bots.slack._mrkdwn", "chunk_mrkdwn": "bots.slack._mrkdwn",
         "markdown_to_mrkdwn": "bots.slack._mrkdwn", "render_progress": "bots.slack._mrkdwn",
         "SLACK_HELP": "bots.slack.connector", "SlackConnector": "bots.slack.connector",
         "SlackOptions": "bots.slack.connector"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
