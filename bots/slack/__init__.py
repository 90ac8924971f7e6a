"""The Slack connector (slack-bolt / slack_sdk): Socket Mode, or HTTP Events API with
signature verification; mrkdwn rendering; ``/geode`` slash command.

Its names are imported when first used (:mod:`bots.slack.options`, the platform's spec,
imports no SDK: the harness reads it in every process).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from geode._imports import lazy_attributes

if TYPE_CHECKING:
    from bots.port import TurnHost
    from bots.slack._mrkdwn import SLACK_LIMIT, chunk_mrkdwn, markdown_to_mrkdwn, render_progress
    from bots.slack.connector import SLACK_HELP, SlackConnector, SlackOptions
    from geode.settings import Secrets, Settings

__all__ = [
    "SLACK_HELP",
    "SLACK_LIMIT",
    "SlackConnector",
    "SlackOptions",
    "build_connector",
    "chunk_mrkdwn",
    "markdown_to_mrkdwn",
    "render_progress",
]

_LAZY = {"SLACK_LIMIT": "bots.slack._mrkdwn", "chunk_mrkdwn": "bots.slack._mrkdwn",
         "markdown_to_mrkdwn": "bots.slack._mrkdwn", "render_progress": "bots.slack._mrkdwn",
         "SLACK_HELP": "bots.slack.connector", "SlackConnector": "bots.slack.connector",
         "SlackOptions": "bots.slack.connector"}


__getattr__ = lazy_attributes(__name__, _LAZY)


def build_connector(*, host: TurnHost, settings: Settings, secrets: Secrets,
                    options: SlackOptions) -> SlackConnector:
    """The connector of ``[channels.slack]`` (its spec's builder, ``geode serve``)."""
    from bots.platforms import required_secret
    from bots.slack.connector import SlackConnector
    from bots.slack.options import SPEC

    return SlackConnector(
        host=host, bot_token=required_secret(SPEC, options, secrets, SPEC.tokens[0]),
        app_token=secrets.get(options.app_token_env),
        signing_secret=secrets.get(options.signing_secret_env), bindings=settings.bindings,
        options=options,
    )
